// Command mutants is the mutation check of the fence (make mutants,
// docs/testing.md): it weakens each shipped rule one at a time, runs the
// tests that can see it, and fails when a rule can be removed with every
// test still green.
//
// The rules are the validations and matchConditions of every
// policies/*/policy.yaml, every binding's validationActions, the
// matchConditions of the webhook configuration, and every refusal of the
// webhook's code (internal/admit, internal/webhook). Mutants are applied to
// a copy of the repository in a temporary directory, never to the checkout:
// a YAML mutant by writing the file in the copy, a Go mutant through
// go test -overlay (and GOFLAGS=-overlay=... for the webhook the e2e
// harness builds), so no source file is ever rewritten.
//
// The offline suites run first, each package's test binary through
// hack/testreport, which names the failed tests; a mutant they did not kill
// goes to the e2e suite on the local control plane (needs bin/ from make
// tools). A surviving mutant makes the command exit 1.
package main

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
)

func main() {
	out := flag.String("out", "", "also write the table (markdown) to this file")
	e2e := flag.String("e2e", "auto", "run the e2e suite for mutants the offline suites did not kill: auto (when bin/ has the control plane), on, off")
	only := flag.String("only", "", "run only the mutants whose ID matches this regular expression (a partial run: never the recorded table)")
	list := flag.Bool("list", false, "list the mutants and exit")
	keep := flag.Bool("keep", false, "keep the temporary copy and the logs")
	flag.Parse()
	if err := run(*out, *e2e, *only, *list, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(exitCode(err))
	}
}

// errSurvivors is returned when at least one mutant survived: exit 1.
type errSurvivors int

func (e errSurvivors) Error() string {
	return fmt.Sprintf("%d mutants survived: a rule whose removal leaves every test green needs the test that would fail", int(e))
}

func exitCode(err error) int {
	if _, ok := err.(errSurvivors); ok {
		return 1
	}
	return 2
}

func run(outPath, e2eMode, only string, list, keep bool) error {
	start := time.Now()
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	if _, err := os.Stat("go.mod"); err != nil {
		return fmt.Errorf("run from the repository root (make mutants): %w", err)
	}
	ms, err := Generate(root)
	if err != nil {
		return err
	}
	if only != "" {
		re, err := regexp.Compile(only)
		if err != nil {
			return err
		}
		var sel []Mutant
		for _, m := range ms {
			if re.MatchString(m.ID) {
				sel = append(sel, m)
			}
		}
		if len(sel) == 0 {
			return fmt.Errorf("-only %q matches no mutant", only)
		}
		ms = sel
	}
	if list {
		for _, m := range ms {
			eq := ""
			if m.Equivalent != "" {
				eq = "  (equivalent, not run)"
			}
			fmt.Printf("%-70s %s%s\n", m.ID, m.File, eq)
		}
		return nil
	}
	switch e2eMode {
	case "auto", "on", "off":
	default:
		return fmt.Errorf("-e2e %q: auto, on or off", e2eMode)
	}

	w, err := newWorkspace(root, keep)
	if err != nil {
		return err
	}
	defer w.close()
	results, err := w.runAll(ms, e2eMode)
	if err != nil {
		return err
	}
	table := renderTable(results, time.Since(start), only != "")
	fmt.Print("\n" + table)
	if outPath != "" {
		if err := os.WriteFile(outPath, []byte(table), 0o644); err != nil {
			return err
		}
	}
	survivors := 0
	for _, r := range results {
		if r.Survived() {
			survivors++
		}
	}
	if survivors > 0 {
		return errSurvivors(survivors)
	}
	return nil
}

// Result is what became of one mutant.
type Result struct {
	Mutant
	// Killer is the run that killed it: a package, or "e2e".
	Killer string
	// Failed are the failed tests of that run (package-level failures as
	// "<package> (package)").
	Failed []string
	// Ran lists the runs tried, in order.
	Ran []string
	// TextOnly are the failed tests that only compare text (textTests):
	// they do not count as a kill.
	TextOnly []string
	// NotRun says why the e2e suite did not run for a mutant the offline
	// suites left alive.
	NotRun string
}

// Survived is true for a mutant no test killed (an equivalent one is not
// run and does not count).
func (r Result) Survived() bool { return r.Equivalent == "" && r.Killer == "" }

func renderTable(rs []Result, d time.Duration, partial bool) string {
	var b strings.Builder
	killed, survived, equiv, e2e := 0, 0, 0, 0
	for _, r := range rs {
		switch {
		case r.Equivalent != "":
			equiv++
		case r.Survived():
			survived++
		default:
			killed++
			if r.Killer == "e2e" {
				e2e++
			}
		}
	}
	fmt.Fprintf(&b, "Mutation check, %s: %d mutants, %d killed (%d only by e2e), %d survived, %d equivalent (not run); %s\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), len(rs), killed, e2e, survived, equiv, d.Round(time.Second))
	if partial {
		b.WriteString("(partial run: -only)\n\n")
	}
	b.WriteString("| rule | caught by |\n|---|---|\n")
	for _, r := range rs {
		var caught string
		switch {
		case r.Equivalent != "":
			caught = "not run, equivalent: " + r.Equivalent
		case r.Survived():
			caught = "**SURVIVED** (ran: " + strings.Join(r.Ran, ", ") + ")"
			if r.NotRun != "" {
				caught += "; " + r.NotRun
			}
			if len(r.TextOnly) > 0 {
				caught += "; failed only tests that compare text: " + strings.Join(r.TextOnly, ", ")
			}
		default:
			names := r.Failed
			more := ""
			if len(names) > 3 {
				more = fmt.Sprintf(" (+%d more)", len(names)-3)
				names = names[:3]
			}
			caught = r.Killer + ": " + strings.Join(names, ", ") + more
		}
		fmt.Fprintf(&b, "| %s | %s |\n", escapeCell(r.Rule), escapeCell(caught))
	}
	return b.String()
}

func escapeCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
