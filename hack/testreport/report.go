package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// event is one line of `go test -json` (go doc test2json), including the
// build events go test writes since Go 1.24.
type event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	ImportPath  string
	FailedBuild string
}

// Allowed is one entry of the skip allowlist: a test that may skip in one
// run, and why.
type Allowed struct {
	// Runs are the runs (the -run flag: test-unit, e2e, e2e-kind, ...)
	// in which the skip is expected. An entry applies to no other run.
	Runs []string `json:"runs"`
	// Package is the import path below the module (e2e, pkg/fence).
	Package string `json:"package"`
	// Test is the full test name, subtests included (TestA/case).
	Test string `json:"test"`
	// Message must occur in the skip message: a test that starts skipping
	// for another reason is not covered by this entry.
	Message string `json:"message"`
	// Reason says why the skip is acceptable and where its check runs
	// instead. Required: an entry without one is refused.
	Reason string `json:"reason"`
}

// LoadAllowlist reads and checks the allowlist file.
func LoadAllowlist(path string) ([]Allowed, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Allowed
	if err := yaml.UnmarshalStrict(b, &out); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i, a := range out {
		if len(a.Runs) == 0 || a.Package == "" || a.Test == "" || a.Message == "" || strings.TrimSpace(a.Reason) == "" {
			return nil, fmt.Errorf("%s: entry %d (%s %s) needs runs, package, test, message and reason", path, i+1, a.Package, a.Test)
		}
	}
	return out, nil
}

type testKey struct{ pkg, test string }

// Skip is a test that skipped, with its message and the entry allowing it.
type Skip struct {
	Package, Test, Message string
	Allowed                *Allowed
}

// Report follows a `go test -json` stream: it prints what `go test` prints
// without -v (package results, the output of failed tests, anything outside
// a test as it comes) and records failures and skips.
type Report struct {
	// Module is the module path, stripped from package names.
	Module string
	// Run names this run for the allowlist.
	Run     string
	Allow   []Allowed
	Verbose bool
	Out     io.Writer

	output  map[testKey][]string
	ran     map[string]bool // packages that ran at least one test
	Skips   []Skip
	Failed  []testKey // tests that failed
	FailPkg []string  // packages that failed (build, TestMain, timeout)
	events  int
}

// Line takes one line of the stream.
func (r *Report) Line(line string) {
	if r.output == nil {
		r.output, r.ran = map[testKey][]string{}, map[string]bool{}
	}
	var e event
	if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &e) != nil || e.Action == "" {
		// Not an event: go test's own stderr, a vet or build message.
		fmt.Fprintln(r.Out, line)
		return
	}
	r.events++
	pkg := strings.TrimPrefix(strings.TrimPrefix(e.Package, r.Module), "/")
	if pkg == "" && e.Package == r.Module {
		pkg = "."
	}
	k := testKey{pkg, e.Test}
	switch e.Action {
	case "build-output":
		fmt.Fprint(r.Out, e.Output)
	case "build-fail":
		r.FailPkg = append(r.FailPkg, e.ImportPath)
	case "run":
		r.ran[pkg] = true
	case "output":
		// A test's output is kept even when printed (-v): a skip's message
		// is read from it.
		if e.Test != "" {
			r.output[k] = append(r.output[k], e.Output)
		}
		switch {
		case r.Verbose:
			fmt.Fprint(r.Out, e.Output)
		case e.Test == "":
			// Package level: TestMain's progress, the ok/FAIL line.
			if e.Output != "PASS\n" && !strings.HasPrefix(e.Output, "=== ") {
				fmt.Fprint(r.Out, e.Output)
			}
		}
	case "fail":
		if e.Test == "" {
			r.FailPkg = append(r.FailPkg, pkg)
			break
		}
		r.Failed = append(r.Failed, k)
		if !r.Verbose {
			fmt.Fprint(r.Out, strings.Join(r.output[k], ""))
		}
		delete(r.output, k)
	case "pass":
		delete(r.output, k)
	case "skip":
		if e.Test == "" {
			break // a package without test files
		}
		s := Skip{Package: pkg, Test: e.Test, Message: skipMessage(r.output[k])}
		for i, a := range r.Allow {
			if a.Package == pkg && a.Test == e.Test && slices.Contains(a.Runs, r.Run) && strings.Contains(s.Message, a.Message) {
				s.Allowed = &r.Allow[i]
				break
			}
		}
		r.Skips = append(r.Skips, s)
		delete(r.output, k)
	}
}

// skipLine is how testing writes a t.Skip message: indented, file:line.
var skipLine = regexp.MustCompile(`^\s+\S+\.go:\d+: `)

// skipMessage is the t.Skip text from a skipped test's output.
func skipMessage(lines []string) string {
	var msg []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		msg = append(msg, strings.TrimSpace(skipLine.ReplaceAllString(l, "")))
	}
	if len(msg) == 0 {
		return "(no message)"
	}
	return strings.Join(msg, " ")
}

// Stale are the allowlist entries of this run whose package ran tests but
// whose test did not skip: the skip is gone (or the test renamed), so the
// entry must go too. (A test that skipped with another message is reported
// as a skip that is not allowed instead.)
func (r *Report) Stale() []Allowed {
	var out []Allowed
	for _, a := range r.Allow {
		if !slices.Contains(a.Runs, r.Run) || !r.ran[a.Package] {
			continue
		}
		found := false
		for _, s := range r.Skips {
			if s.Package == a.Package && s.Test == a.Test {
				found = true
				break
			}
		}
		if !found {
			out = append(out, a)
		}
	}
	return out
}

// Summary prints every skip and every finding, and returns the problems
// that fail the run (failed tests and packages aside, which go test's exit
// status reports too).
func (r *Report) Summary(allowlist string) []string {
	var problems []string
	if r.events == 0 {
		problems = append(problems, "no test events on the input: did go test run with -json?")
	}
	fmt.Fprintf(r.Out, "\n--- testreport (%s): %d skipped\n", r.Run, len(r.Skips))
	for _, s := range r.Skips {
		verdict := "NOT ALLOWED"
		if s.Allowed != nil {
			verdict = "allowed: " + strings.TrimSpace(s.Allowed.Reason)
		} else {
			problems = append(problems, fmt.Sprintf("%s %s skipped and is not in %s for run %q", s.Package, s.Test, allowlist, r.Run))
		}
		fmt.Fprintf(r.Out, "SKIP %s %s: %s\n     %s\n", s.Package, s.Test, s.Message, verdict)
	}
	for _, a := range r.Stale() {
		problems = append(problems, fmt.Sprintf("%s %s is in %s for run %q but did not skip: remove the entry", a.Package, a.Test, allowlist, r.Run))
	}
	for _, k := range r.Failed {
		fmt.Fprintf(r.Out, "FAIL %s %s\n", k.pkg, k.test)
	}
	for _, p := range r.FailPkg {
		fmt.Fprintf(r.Out, "FAIL %s (package)\n", p)
	}
	for _, p := range problems {
		fmt.Fprintf(r.Out, "testreport: %s\n", p)
	}
	return problems
}

// FailureLines is the -failures file: one "package test" line per failed
// test, then "package (package)" for a package that failed with no failed
// test (its build, TestMain, a timeout), so a script that breaks a rule
// (the mutation check) sees every way a run can fail.
func (r *Report) FailureLines() string {
	var b strings.Builder
	for _, k := range r.Failed {
		fmt.Fprintf(&b, "%s %s\n", k.pkg, k.test)
	}
	for _, p := range r.FailPkg {
		if !slices.ContainsFunc(r.Failed, func(k testKey) bool { return k.pkg == p }) {
			fmt.Fprintf(&b, "%s (package)\n", p)
		}
	}
	return b.String()
}
