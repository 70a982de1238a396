package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
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
// run, or (NotRun) one that is listed but that never runs there,
// and why.
type Allowed struct {
	// Runs are the runs (the -run flag: test-unit, e2e, e2e-kind, ...)
	// in which the skip is expected. An entry applies to no other run.
	Runs []string `json:"runs"`
	// Package is the import path below the module (e2e, pkg/fence).
	Package string `json:"package"`
	// Test is the full test name, subtests included (TestA/case).
	Test string `json:"test"`
	// Message must occur in the skip message: a test that starts skipping
	// for another reason is not covered by this entry. A NotRun entry has
	// none.
	Message string `json:"message,omitempty"`
	// NotRun: the top-level test is listed (ListTests) but never
	// starts in this run (no skip either: a TestMain that leaves it out, a
	// test only its own target runs). A NotRun entry of a test that ran is
	// stale, as is one of a test that is not listed.
	NotRun bool `json:"notRun,omitempty"`
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
		switch {
		case a.NotRun && (len(a.Runs) == 0 || a.Package == "" || a.Test == "" || strings.Contains(a.Test, "/") || a.Message != "" || strings.TrimSpace(a.Reason) == ""):
			return nil, fmt.Errorf("%s: entry %d (%s %s) is notRun: it needs runs, package, a top-level test and reason, and no message", path, i+1, a.Package, a.Test)
		case !a.NotRun && (len(a.Runs) == 0 || a.Package == "" || a.Test == "" || a.Message == "" || strings.TrimSpace(a.Reason) == ""):
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
	// Filter is the run's -run, -skip, -bench and -fuzz: an allowlist
	// entry of a test it does not select is not judged.
	Filter Filter
	// Listed, when set, is what ListTests names per package (the
	// run's packages and build tags): each test, fuzz target and example
	// the filter selects must have started, or be a NotRun entry.
	// ListFailed are the packages that could not be listed.
	Listed     map[string][]string
	ListFailed []string
	// ListError is why go test -list could not run: a problem.
	ListError string

	output   map[testKey][]string
	ran      map[string]bool // packages that ran at least one test
	ranTests map[testKey]bool
	Skips    []Skip
	Failed   []testKey // tests that failed
	FailPkg  []string  // packages that failed (build, TestMain, timeout)
	events   int
}

// Line takes one line of the stream.
func (r *Report) Line(line string) {
	if r.output == nil {
		r.output, r.ran, r.ranTests = map[testKey][]string{}, map[string]bool{}, map[testKey]bool{}
	}
	var e event
	if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &e) != nil || e.Action == "" {
		// Not an event: go test's own stderr, a vet or build message.
		fmt.Fprintln(r.Out, line)
		return
	}
	r.events++
	pkg := shortPackage(r.Module, e.Package)
	k := testKey{pkg, e.Test}
	switch e.Action {
	case "build-output":
		fmt.Fprint(r.Out, e.Output)
	case "build-fail":
		r.FailPkg = append(r.FailPkg, e.ImportPath)
	case "run":
		r.ran[pkg] = true
		r.ranTests[k] = true
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
			if !a.NotRun && a.Package == pkg && a.Test == e.Test && slices.Contains(a.Runs, r.Run) && strings.Contains(s.Message, a.Message) {
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

// Stale are the skip entries of this run whose package ran tests but whose
// test, selected by the run's filter, did not skip: the skip is gone (or
// the test renamed), so the entry must go too. (A test that skipped with
// another message is reported as a skip that is not allowed instead.)
func (r *Report) Stale() []Allowed {
	var out []Allowed
	for _, a := range r.Allow {
		if a.NotRun || !slices.Contains(a.Runs, r.Run) || !r.ran[a.Package] || !r.Filter.Selects(topLevel(a.Test)) {
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

func topLevel(test string) string {
	top, _, _ := strings.Cut(test, "/")
	return top
}

// Missing is a listed test the filter selects that never
// started, with the NotRun entry allowing it.
type Missing struct {
	Package, Test string
	Allowed       *Allowed
}

// NotRun compares Listed with the tests that started: the selected ones
// that never did, and the NotRun entries of this run that are stale (their
// test ran, or go test -list does not name it). A package that failed is
// not judged test by test (a build failure, a TestMain that gave up, a
// timeout: the run fails on it already), nor one go test -list did not
// list (not part of this run).
func (r *Report) NotRun() (missing []Missing, stale []Allowed) {
	judged := func(pkg string) bool {
		_, listed := r.Listed[pkg]
		return listed && !slices.Contains(r.FailPkg, pkg)
	}
	for _, pkg := range slices.Sorted(maps.Keys(r.Listed)) {
		if !judged(pkg) {
			continue
		}
		for _, name := range r.Listed[pkg] {
			if !r.Filter.Expects(name) || r.ranTests[testKey{pkg, name}] {
				continue
			}
			m := Missing{Package: pkg, Test: name}
			for i, a := range r.Allow {
				if a.NotRun && a.Package == pkg && a.Test == name && slices.Contains(a.Runs, r.Run) {
					m.Allowed = &r.Allow[i]
					break
				}
			}
			missing = append(missing, m)
		}
	}
	for _, a := range r.Allow {
		if !a.NotRun || !slices.Contains(a.Runs, r.Run) || !judged(a.Package) || !r.Filter.Selects(a.Test) {
			continue
		}
		if r.ranTests[testKey{a.Package, a.Test}] || !slices.Contains(r.Listed[a.Package], a.Test) {
			stale = append(stale, a)
		}
	}
	return missing, stale
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
	if r.ListError != "" {
		problems = append(problems, "could not list the expected tests: "+r.ListError)
	}
	if r.Listed != nil {
		problems = append(problems, r.notRunSummary(allowlist)...)
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

// notRunSummary prints how many listed tests were expected and each that
// never ran, and returns the problems among them.
func (r *Report) notRunSummary(allowlist string) []string {
	var problems []string
	for _, p := range r.ListFailed {
		if !slices.Contains(r.FailPkg, p) {
			problems = append(problems, fmt.Sprintf("go test -list failed in %s, go test did not: its tests are not checked", p))
		}
	}
	all := Filter{Fuzz: r.Filter.Fuzz, Bench: r.Filter.Bench}
	listed, expected := 0, 0
	for _, pkg := range slices.Sorted(maps.Keys(r.Listed)) {
		lost := 0
		for _, n := range r.Listed[pkg] {
			if all.Expects(n) {
				listed++
			}
			if r.Filter.Expects(n) {
				expected++
				if !r.ranTests[testKey{pkg, n}] {
					lost++
				}
			}
		}
		if lost > 0 && slices.Contains(r.FailPkg, pkg) {
			fmt.Fprintf(r.Out, "NOT RUN %s: %d tests (the package failed)\n", pkg, lost)
		}
	}
	missing, stale := r.NotRun()
	selection := ""
	if r.Filter.Run != "" {
		selection += fmt.Sprintf(" -run %q", r.Filter.Run)
	}
	if r.Filter.Skip != "" {
		selection += fmt.Sprintf(" -skip %q", r.Filter.Skip)
	}
	if selection != "" {
		selection = " (those" + selection + " selects)"
	}
	fmt.Fprintf(r.Out, "--- testreport (%s): %d tests listed in %d packages, %d expected to run%s, %d never ran\n",
		r.Run, listed, len(r.Listed), expected, selection, len(missing))
	if expected == 0 && !r.Filter.Bench && !r.Filter.Fuzz {
		problems = append(problems, fmt.Sprintf("none of the %d listed tests is expected to run%s: the run tests nothing", listed, selection))
	}
	for _, m := range missing {
		verdict := "NOT ALLOWED"
		if m.Allowed != nil {
			verdict = "allowed: " + strings.TrimSpace(m.Allowed.Reason)
		} else {
			problems = append(problems, fmt.Sprintf("%s %s never ran: go test -list names it, and %s has no notRun entry for it in run %q", m.Package, m.Test, allowlist, r.Run))
		}
		fmt.Fprintf(r.Out, "NOT RUN %s %s\n     %s\n", m.Package, m.Test, verdict)
	}
	for _, a := range stale {
		why := "ran"
		if !slices.Contains(r.Listed[a.Package], a.Test) {
			why = "go test -list does not name it"
		}
		problems = append(problems, fmt.Sprintf("%s %s is a notRun entry of %s for run %q but %s: remove the entry", a.Package, a.Test, allowlist, r.Run, why))
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
