// Command mutants is the mutation check of the fence (make mutants,
// docs/testing.md): it weakens each shipped rule one at a time, runs the
// tests that can see it, and fails when a rule can be removed with every
// test still green.
//
// The rules are those of every policies/*/policy.yaml (validations,
// matchConditions, failurePolicy, matchConstraints, variables), of every
// binding, of the webhook configuration (rules, selectors, matchConditions,
// failurePolicy, timeoutSeconds), and of the webhook's code (each refusal
// of internal/admit and internal/webhook, each early admission.Allowed
// branch of a handler): Generate lists the mutants. Mutants are applied to
// a copy of the repository in a temporary directory, never to the checkout:
// a YAML mutant by writing the file in the copy, a Go mutant through
// go test -overlay (and GOFLAGS=-overlay=... for the webhook the e2e
// harness builds), so no source file is ever rewritten.
//
// The offline suites run first, each package's test binary through
// hack/testreport, which names the failed tests; a mutant they did not kill
// goes to the e2e suite on the local control plane (needs bin/ from make
// tools). A test that fails on a neutral edit of the mutated file (a
// comment added) is not credited with its mutants' kills. A surviving
// mutant makes the command exit 1. -sample runs a bounded sample, drawn by
// -seed (make mutants-sample).
package main

import (
	"flag"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

func main() {
	out := flag.String("out", "", "also write the table (markdown) to this file")
	e2e := flag.String("e2e", "auto", "run the e2e suite for mutants the offline suites did not kill: auto (when bin/ has the control plane), on, off (they are reported, not failed)")
	only := flag.String("only", "", "run only the mutants whose ID matches this regular expression (a partial run: never the recorded table)")
	list := flag.Bool("list", false, "list the mutants and exit")
	keep := flag.Bool("keep", false, "keep the temporary copy and the logs")
	sample := flag.Int("sample", 0, "run only this many mutants, drawn by -seed from those -only selects (a partial run); 0: all")
	seed := flag.String("seed", "0", "any string: the same seed and mutant list draw the same -sample")
	flag.Parse()
	if err := run(*out, *e2e, *only, *list, *keep, *sample, *seed); err != nil {
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

func run(outPath, e2eMode, only string, list, keep bool, sample int, seed string) error {
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
	partial := ""
	if only != "" {
		partial = fmt.Sprintf("-only %q", only)
	}
	if sample > 0 {
		n := len(ms)
		ms = draw(ms, sample, seed)
		partial = strings.TrimPrefix(fmt.Sprintf("%s, -sample %d -seed %s: %d of %d mutants", partial, sample, seed, len(ms), n), ", ")
		fmt.Printf("mutants: %s\n", partial)
	} else if sample < 0 {
		return fmt.Errorf("-sample %d: a number of mutants", sample)
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
	table := renderTable(results, w.neutralReport(), time.Since(start), partial)
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

// draw returns n of ms (all when there are fewer), leaving out the
// equivalent ones, which are never run: the same seed and list give the
// same draw, kept in the list's order.
func draw(ms []Mutant, n int, seed string) []Mutant {
	var pool []Mutant
	for _, m := range ms {
		if m.Equivalent == "" {
			pool = append(pool, m)
		}
	}
	h := fnv.New64a()
	h.Write([]byte(seed))
	rng := rand.New(rand.NewPCG(h.Sum64(), 0x6d7574616e7473))
	idx := rng.Perm(len(pool))
	if n < len(idx) {
		idx = idx[:n]
	}
	sort.Ints(idx)
	out := make([]Mutant, 0, len(idx))
	for _, i := range idx {
		out = append(out, pool[i])
	}
	return out
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
	// NotCredited are the failed tests that do not count as a kill, each
	// with why: it compares text (textTests), or it fails on the neutral
	// edit of the mutated file too.
	NotCredited []string
	// NotRun says why the e2e suite did not run for a mutant the offline
	// suites left alive.
	NotRun string
	// Undecided is set for a mutant the offline suites left alive when the
	// e2e suite was not to run (-e2e off): no survivor, no kill.
	Undecided bool
}

// Survived is true for a mutant no test killed (an equivalent one is not
// run and does not count, an undecided one was not judged).
func (r Result) Survived() bool { return r.Equivalent == "" && r.Killer == "" && !r.Undecided }

func renderTable(rs []Result, neutral map[string][]string, d time.Duration, partial string) string {
	var b strings.Builder
	killed, survived, equiv, e2e, undecided := 0, 0, 0, 0, 0
	for _, r := range rs {
		switch {
		case r.Equivalent != "":
			equiv++
		case r.Undecided:
			undecided++
		case r.Survived():
			survived++
		default:
			killed++
			if r.Killer == "e2e" {
				e2e++
			}
		}
	}
	undecidedNote := ""
	if undecided > 0 {
		undecidedNote = fmt.Sprintf(", %d not killed offline (e2e not run)", undecided)
	}
	fmt.Fprintf(&b, "Mutation check, %s: %d mutants, %d killed (%d only by e2e), %d survived%s, %d equivalent (not run); %s\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), len(rs), killed, e2e, survived, undecidedNote, equiv, d.Round(time.Second))
	if partial != "" {
		fmt.Fprintf(&b, "(partial run: %s)\n\n", partial)
	}
	b.WriteString("| rule | caught by |\n|---|---|\n")
	for _, r := range rs {
		var caught string
		switch {
		case r.Equivalent != "":
			caught = "not run, equivalent: " + r.Equivalent
		case r.Undecided, r.Survived():
			caught = "**SURVIVED** (ran: " + strings.Join(r.Ran, ", ") + ")"
			if r.Undecided {
				caught = "not killed offline, e2e not run (-e2e off; ran: " + strings.Join(r.Ran, ", ") + ")"
			}
			if r.NotRun != "" {
				caught += "; " + r.NotRun
			}
			if len(r.NotCredited) > 0 {
				caught += "; failed only tests not credited: " + strings.Join(r.NotCredited, ", ")
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
	if len(neutral) > 0 {
		b.WriteString("\nTests that fail on a neutral edit of the file (a comment added), not credited with its mutants' kills:\n\n")
		for _, f := range slices.Sorted(maps.Keys(neutral)) {
			fmt.Fprintf(&b, "- %s: %s\n", f, strings.Join(neutral[f], ", "))
		}
	}
	return b.String()
}

func escapeCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
