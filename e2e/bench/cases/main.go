// Command cases runs the end-to-end suite once per enforcer — the shipped
// bundle, then Kyverno and Gatekeeper each enforcing the same fence in its
// own language (E2E_ENFORCER, e2e/peers) — and prints which cases each gets
// right and wrong as one Markdown table (BENCHMARKS.md).
//
//	go -C e2e run ./bench/cases [-out bin/bench] [-enforcers sandbox-fence,kyverno,gatekeeper]
//
// A case is a leaf test of the suite: a test without subtests, or a
// subtest. Every top-level test `go test -list` names is a row, so a test
// a run never reached (a timeout, a panic) shows as "not run" instead of
// vanishing. It exits non-zero when the shipped bundle gets a case wrong or
// does not finish one: a peer's wrong case is a finding to report, not a
// failure of this run. cases.md is rewritten after each suite, so a run cut
// short still leaves the table of the suites it finished.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "cases %s: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// event is one line of `go test -json`.
type event struct {
	Action string
	Test   string
	Output string
}

// result is one case under one enforcer.
type result struct {
	action string   // pass, fail, skip
	why    []string // failure or skip lines
	codes  []string // HTTP codes of the peer's denials (peer-wire lines)
}

type run struct {
	enforcer string
	results  map[string]*result
	elapsed  time.Duration
}

var wireRE = regexp.MustCompile(`peer-wire: \S+ answered HTTP (\d+)`)

func main() {
	out := flag.String("out", "", "directory for cases.md (default: print only)")
	list := flag.String("enforcers", framework.ShippedEnforcer+",kyverno,gatekeeper", "enforcers to run the suite against")
	timeout := flag.String("timeout", "8m", "go test -timeout of each run")
	flag.Parse()
	root, err := framework.RepoRoot()
	if err != nil {
		logf("%v", err)
		os.Exit(2)
	}
	suite, err := listSuite(root)
	if err != nil {
		logf("%v", err)
		os.Exit(2)
	}
	logf("the suite has %d top-level tests (go test -list)", len(suite))
	var runs []*run
	var md string
	for _, e := range strings.Split(*list, ",") {
		r, err := runSuite(root, strings.TrimSpace(e), *timeout)
		if err != nil {
			logf("%s: %v", e, err)
			os.Exit(1)
		}
		runs = append(runs, r)
		md = table(runs, suite)
		if *out != "" {
			if err := writeTable(*out, md); err != nil {
				logf("%v", err)
				os.Exit(1)
			}
		}
	}
	fmt.Println(md)
	for _, r := range runs {
		if r.enforcer != framework.ShippedEnforcer {
			continue
		}
		cases := leaves(runs, suite)
		if n := wrong(r, cases); n > 0 {
			logf("the shipped bundle got %d case(s) wrong", n)
			os.Exit(1)
		}
		if missed := unfinished(r, cases); len(missed) > 0 {
			logf("the shipped bundle did not finish %d case(s): %s", len(missed), strings.Join(missed, ", "))
			os.Exit(1)
		}
	}
}

func writeTable(dir, md string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(dir, "cases.md")
	if err := os.WriteFile(path, []byte(md), 0o644); err != nil {
		return err
	}
	logf("wrote %s", path)
	return nil
}

// listSuite is the suite's top-level tests, as `go test -list` names them
// without running anything.
func listSuite(root string) ([]string, error) {
	cmd := exec.Command("go", "test", "-tags", "e2e", "-list", ".", ".")
	cmd.Dir = filepath.Join(root, "e2e")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go test -list: %w\n%s", err, tail(stderr.String(), 30))
	}
	return parseList(stdout), nil
}

// parseList reads `go test -list` output: one name per line, then the
// package's ok line.
func parseList(out []byte) []string {
	var names []string
	for _, l := range strings.Split(string(out), "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "Test") && !strings.ContainsAny(l, " \t") {
			names = append(names, l)
		}
	}
	slices.Sort(names)
	return names
}

// unfinished are the cases r has no verdict for: never started (its
// top-level test is listed but absent from the run) or started and never
// ended.
func unfinished(r *run, cases []string) []string {
	var out []string
	for _, c := range cases {
		if res := resultFor(r, c); res == nil || res.action == "" {
			out = append(out, c)
		}
	}
	return out
}

func runSuite(root, enforcer, timeout string) (*run, error) {
	logf("running the e2e suite against %s", enforcer)
	start := time.Now()
	// The suite is the e2e module's root package.
	cmd := exec.Command("go", "test", "-count=1", "-tags", "e2e", "-json", "-timeout", timeout, ".")
	cmd.Dir = filepath.Join(root, "e2e")
	cmd.Env = append(os.Environ(), framework.EnvEnforcer+"="+enforcer)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	r := &run{enforcer: enforcer, results: map[string]*result{}, elapsed: time.Since(start)}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return nil, err
	}
	sc := bufio.NewScanner(bytes.NewReader(stdout))
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	for sc.Scan() {
		var ev event
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Test == "" {
			continue
		}
		res := r.results[ev.Test]
		if res == nil {
			res = &result{}
			r.results[ev.Test] = res
		}
		switch ev.Action {
		case "pass", "fail", "skip":
			res.action = ev.Action
		case "output":
			line := strings.TrimSpace(ev.Output)
			if m := wireRE.FindStringSubmatch(line); m != nil {
				res.codes = append(res.codes, m[1])
			} else if strings.Contains(line, "_test.go:") || strings.Contains(line, "n/a:") {
				res.why = append(res.why, line)
			}
		}
	}
	if len(r.results) == 0 {
		return nil, fmt.Errorf("the suite ran no test (exit %v); its stderr ends with:\n%s", err, tail(stderr.String(), 30))
	}
	own := leaves([]*run{r}, nil)
	logf("%s: %d right, %d wrong, %d n/a in %s", enforcer, count(r, own, "pass"), wrong(r, own), count(r, own, "skip"), r.elapsed.Round(time.Second))
	return r, nil
}

// leaves are the cases: tests with no subtests, and subtests. suite's
// top-level tests count even where no run reached them.
func leaves(runs []*run, suite []string) []string {
	all := map[string]bool{}
	for _, t := range suite {
		all[t] = true
	}
	for _, r := range runs {
		for t := range r.results {
			all[t] = true
		}
	}
	var out []string
	for t := range all {
		parent := false
		for u := range all {
			if strings.HasPrefix(u, t+"/") {
				parent = true
				break
			}
		}
		if !parent {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

// resultFor is c's result under r; a case r did not reach takes its
// nearest parent's (a parent skipped as n/a under a peer never starts its
// subtests).
func resultFor(r *run, c string) *result {
	_, res := judge(r, c)
	return res
}

// judge is the test whose result decides c under r: c itself, or the
// nearest parent r reached.
func judge(r *run, c string) (string, *result) {
	for {
		if res := r.results[c]; res != nil {
			return c, res
		}
		i := strings.LastIndexByte(c, '/')
		if i < 0 {
			return "", nil
		}
		c = c[:i]
	}
}

// count is how many verdicts among cases end with action under r. A
// parent that decides several cases it never started (it failed or was
// skipped before them) counts once, not once per subtest.
func count(r *run, cases []string, action string) int {
	return len(verdicts(r, cases, func(res *result) bool { return res.action == action }))
}

// verdicts are the tests that decide cases under r and whose result keep
// holds, each once.
func verdicts(r *run, cases []string, keep func(*result) bool) []string {
	var out []string
	for _, c := range cases {
		if key, res := judge(r, c); res != nil && keep(res) && !slices.Contains(out, key) {
			out = append(out, key)
		}
	}
	return out
}

func wrong(r *run, cases []string) int { return count(r, cases, "fail") }

// The ways a case goes wrong, told apart by the suite's failure message
// (e2e/framework/verdict.go): a refusal with the wrong message or code is
// not an admission.
const (
	wrongAdmitted = "admitted what the rule refuses"
	wrongMessage  = "refused, with another message or code"
	wrongValid    = "refused a valid write"
	wrongOther    = "other (a check that did not settle)"
)

var wrongKinds = []string{wrongAdmitted, wrongMessage, wrongValid, wrongOther}

// wrongKind is how a failed case went wrong.
func wrongKind(res *result) string {
	text := strings.Join(res.why, "\n")
	switch {
	case strings.Contains(text, "admitted, want a denial") || strings.Contains(text, "(last: admitted)"):
		return wrongAdmitted
	case strings.Contains(text, "want admitted, got denied"):
		return wrongValid
	case strings.Contains(text, " lacks ") || strings.Contains(text, "want a denial by"):
		return wrongMessage
	}
	return wrongOther
}

func table(runs []*run, suite []string) string {
	var b strings.Builder
	cases := leaves(runs, suite)
	b.WriteString("| case |")
	for _, r := range runs {
		b.WriteString(" " + r.enforcer + " |")
	}
	b.WriteString("\n|---|")
	for range runs {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, c := range cases {
		b.WriteString("| " + strings.ReplaceAll(strings.ReplaceAll(c, "_", " "), "|", "/") + " |")
		for _, r := range runs {
			b.WriteString(" " + cell(resultFor(r, c)) + " |")
		}
		b.WriteString("\n")
	}
	b.WriteString("| **right / wrong / n/a** |")
	for _, r := range runs {
		fmt.Fprintf(&b, " **%d / %d / %d** |", count(r, cases, "pass"), wrong(r, cases), count(r, cases, "skip"))
	}
	for _, k := range wrongKinds {
		b.WriteString("\n| wrong: " + k + " |")
		for _, r := range runs {
			n := len(verdicts(r, cases, func(res *result) bool { return res.action == "fail" && wrongKind(res) == k }))
			fmt.Fprintf(&b, " %d |", n)
		}
	}
	b.WriteString("\n| **not run or not finished** |")
	for _, r := range runs {
		fmt.Fprintf(&b, " **%d** |", len(unfinished(r, cases)))
	}
	b.WriteString("\n\n")
	for _, r := range runs {
		codes := map[string]int{}
		for _, res := range r.results {
			for _, c := range res.codes {
				codes[c]++
			}
		}
		if len(codes) > 0 {
			var parts []string
			for c, n := range codes {
				parts = append(parts, fmt.Sprintf("HTTP %s: %d", c, n))
			}
			slices.Sort(parts)
			fmt.Fprintf(&b, "- %s denials seen by the cases: %s (contract §8.1 requires 422).\n", r.enforcer, strings.Join(parts, ", "))
		}
		fmt.Fprintf(&b, "- %s: suite wall time %s.\n", r.enforcer, r.elapsed.Round(time.Second))
	}
	return b.String()
}

func cell(res *result) string {
	if res == nil {
		return "not run"
	}
	switch res.action {
	case "pass":
		return "right"
	case "skip":
		return "n/a"
	case "fail":
		why := "wrong"
		for _, w := range res.why {
			if !strings.Contains(w, "n/a:") {
				why = "**wrong**: " + clip(w, 160)
				break
			}
		}
		return strings.ReplaceAll(why, "|", "/")
	}
	return "not finished"
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
