package main

import (
	"encoding/json"
	"go/build"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const module = "github.com/sandbox-fence/sandbox-fence"

// ev is one go test -json line.
func ev(action, pkg, test, output string) string {
	b, _ := json.Marshal(map[string]string{"Action": action, "Package": module + "/" + pkg, "Test": test, "Output": output})
	return string(b)
}

func skipped(pkg, test, msg string) []string {
	return []string{
		ev("run", pkg, test, ""),
		ev("output", pkg, test, "=== RUN   "+test+"\n"),
		ev("output", pkg, test, "    x_test.go:12: "+msg+"\n"),
		ev("output", pkg, test, "--- SKIP: "+test+" (0.00s)\n"),
		ev("skip", pkg, test, ""),
	}
}

func passed(pkg, test string) []string {
	return []string{ev("run", pkg, test, ""), ev("output", pkg, test, "=== RUN   "+test+"\n"), ev("pass", pkg, test, "")}
}

var outage = Allowed{Runs: []string{"e2e-kind"}, Package: "e2e", Test: "TestOutage", Message: "no handle on the webhook process", Reason: "in-cluster restarts are the node suite's"}

func TestReportFindsEverySkipThatIsNotAllowed(t *testing.T) {
	type verdict struct {
		Skips    []string
		Stale    []string
		Problems int
		Failed   int
	}
	tests := []struct {
		name  string
		run   string
		lines [][]string
		want  verdict
	}{
		{
			name:  "a skip the allowlist names for this run, with its message, is allowed",
			run:   "e2e-kind",
			lines: [][]string{skipped("e2e", "TestOutage", "the kind provider gives the suite no handle on the webhook process")},
			want:  verdict{Skips: []string{"e2e TestOutage allowed"}},
		},
		{
			name:  "the same skip in another run is not allowed",
			run:   "e2e",
			lines: [][]string{skipped("e2e", "TestOutage", "the kind provider gives the suite no handle on the webhook process")},
			want:  verdict{Skips: []string{"e2e TestOutage NOT ALLOWED"}, Problems: 1},
		},
		{
			name:  "the listed test skipping for another reason is not allowed",
			run:   "e2e-kind",
			lines: [][]string{skipped("e2e", "TestOutage", "the webhook is not installed on this cluster")},
			want:  verdict{Skips: []string{"e2e TestOutage NOT ALLOWED"}, Problems: 1},
		},
		{
			name:  "a subtest skip is named with its parent",
			run:   "test-unit",
			lines: [][]string{passed("policies", "TestA"), skipped("policies", "TestA/a case", "later")},
			want:  verdict{Skips: []string{"policies TestA/a case NOT ALLOWED"}, Problems: 1},
		},
		{
			name:  "a listed test that ran and passed is a stale entry",
			run:   "e2e-kind",
			lines: [][]string{passed("e2e", "TestOutage")},
			want:  verdict{Stale: []string{"e2e TestOutage"}, Problems: 1},
		},
		{
			name:  "a listed test of a package that did not run is not judged",
			run:   "e2e-kind",
			lines: [][]string{passed("pkg/fence", "TestB")},
			want:  verdict{},
		},
		{
			name:  "a failed test is counted, skips aside",
			run:   "test-unit",
			lines: [][]string{{ev("run", "pkg/fence", "TestC", ""), ev("output", "pkg/fence", "TestC", "    c_test.go:3: boom\n"), ev("fail", "pkg/fence", "TestC", "")}},
			want:  verdict{Failed: 1},
		},
		{
			name:  "no events at all is a problem: go test did not run with -json",
			run:   "test-unit",
			lines: [][]string{{"ok  \tgithub.com/x\t0.1s"}},
			want:  verdict{Problems: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			r := &Report{Module: module, Run: tt.run, Allow: []Allowed{outage}, Out: &out}
			for _, ls := range tt.lines {
				for _, l := range ls {
					r.Line(l)
				}
			}
			problems := r.Summary("allowed-skips.yaml")
			got := verdict{Problems: len(problems), Failed: len(r.Failed)}
			for _, s := range r.Skips {
				v := "NOT ALLOWED"
				if s.Allowed != nil {
					v = "allowed"
				}
				got.Skips = append(got.Skips, s.Package+" "+s.Test+" "+v)
			}
			for _, a := range r.Stale() {
				got.Stale = append(got.Stale, a.Package+" "+a.Test)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("(-want +got):\n%s\noutput:\n%s", d, out.String())
			}
		})
	}
}

func TestReportPrintsWhatGoTestPrintsAndEverySkip(t *testing.T) {
	var out strings.Builder
	r := &Report{Module: module, Run: "test-unit", Out: &out}
	lines := append(passed("pkg/fence", "TestQuiet"),
		ev("output", "pkg/fence", "TestQuiet", "    not shown: the test passed\n"),
		ev("run", "pkg/fence", "TestLoud", ""),
		ev("output", "pkg/fence", "TestLoud", "    loud_test.go:9: shown: the test failed\n"),
		ev("fail", "pkg/fence", "TestLoud", ""),
		ev("output", "pkg/fence", "", "PASS\n"),
		ev("output", "pkg/fence", "", "e2e 10:00:00.000: setup progress outside any test\n"),
		`go: downloading example.com/m v1.0.0`,
	)
	lines = append(lines, skipped("policies", "TestSkip", "why it skipped")...)
	for _, l := range lines {
		r.Line(l)
	}
	r.Summary("allowed-skips.yaml")
	want := `    loud_test.go:9: shown: the test failed
e2e 10:00:00.000: setup progress outside any test
go: downloading example.com/m v1.0.0

--- testreport (test-unit): 1 skipped
SKIP policies TestSkip: why it skipped
     NOT ALLOWED
FAIL pkg/fence TestLoud
testreport: policies TestSkip skipped and is not in allowed-skips.yaml for run "test-unit"
`
	if d := cmp.Diff(want, out.String()); d != "" {
		t.Errorf("output (-want +got):\n%s", d)
	}
}

// make e2e-kind runs testreport -v; a skip's message must still be read
// (it once read "(no message)" there, and every allowed kind skip failed).
func TestAVerboseReportStillReadsTheSkipMessage(t *testing.T) {
	var out strings.Builder
	r := &Report{Module: module, Run: "e2e-kind", Out: &out, Verbose: true, Allow: []Allowed{outage}}
	for _, l := range skipped("e2e", "TestOutage", "the kind provider gives the suite no handle on the webhook process") {
		r.Line(l)
	}
	if problems := r.Summary("allowed-skips.yaml"); len(problems) != 0 {
		t.Errorf("problems %q, want none: the skip is allowed for e2e-kind\n%s", problems, out.String())
	}
	if !strings.Contains(out.String(), "SKIP e2e TestOutage: the kind provider gives the suite no handle on the webhook process") {
		t.Errorf("the summary does not show the skip's message:\n%s", out.String())
	}
}

func TestAllowlistEntriesNeedAReason(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.yaml")
	for _, tc := range []struct{ name, yaml, wantErr string }{
		{"a complete entry loads", "- {runs: [e2e], package: e2e, test: TestA, message: m, reason: r}\n", ""},
		{"an entry without a reason is refused", "- {runs: [e2e], package: e2e, test: TestA, message: m}\n", "needs runs, package, test, message and reason"},
		{"an entry without runs is refused", "- {package: e2e, test: TestA, message: m, reason: r}\n", "needs runs"},
		{"a misspelt key is refused", "- {run: [e2e], package: e2e, test: TestA, message: m, reason: r}\n", "unknown field"},
		{"a notRun entry loads without a message", "- {runs: [e2e], package: e2e, test: TestA, notRun: true, reason: r}\n", ""},
		{"a notRun entry with a message is refused", "- {runs: [e2e], package: e2e, test: TestA, notRun: true, message: m, reason: r}\n", "is notRun"},
		{"a notRun entry of a subtest is refused: go test -list names top-level tests", "- {runs: [e2e], package: e2e, test: TestA/x, notRun: true, reason: r}\n", "is notRun"},
		{"a notRun entry without a reason is refused", "- {runs: [e2e], package: e2e, test: TestA, notRun: true}\n", "is notRun"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(tc.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := LoadAllowlist(path)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("LoadAllowlist: %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// The committed allowlist loads, and every entry names a run a make target
// uses: one passed to gotest by name, or the e2e target's e2e-<provider>
// (the providers other than local that e2e/provider.FromEnv accepts).
func TestTheCommittedAllowlistLoads(t *testing.T) {
	allow, err := LoadAllowlist("allowed-skips.yaml")
	if err != nil {
		t.Fatal(err)
	}
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	e2eRuns := map[string]bool{"e2e": true, "e2e-kind": true, "e2e-kubeconfig": true}
	if !strings.Contains(string(mk), "$(call gotest,$(E2E_RUN),") {
		e2eRuns = map[string]bool{}
	}
	for _, a := range allow {
		for _, run := range a.Runs {
			if !e2eRuns[run] && !strings.Contains(string(mk), "$(call gotest,"+run+",") {
				t.Errorf("entry %s %s names run %q, which no make target passes to hack/testreport", a.Package, a.Test, run)
			}
		}
	}
}

// TestFailureLinesNameTestsAndPackagesThatFailedOutsideATest: the -failures
// file the mutation check reads names each failed test, and a package that
// failed with no failed test (an e2e setup that never got enforcement, a
// build failure), but not a package whose failure a failed test explains.
func TestFailureLinesNameTestsAndPackagesThatFailedOutsideATest(t *testing.T) {
	r := &Report{Module: module, Run: "test-unit", Out: io.Discard}
	for _, l := range []string{
		ev("run", "policies", "TestPolicyCases", ""),
		ev("run", "policies", "TestPolicyCases/a", ""),
		ev("fail", "policies", "TestPolicyCases/a", ""),
		ev("fail", "policies", "TestPolicyCases", ""),
		ev("fail", "policies", "", ""),
		ev("output", "e2e", "", "setup: the enforcement marker was never denied\n"),
		ev("fail", "e2e", "", ""),
	} {
		r.Line(l)
	}
	want := "policies TestPolicyCases/a\npolicies TestPolicyCases\ne2e (package)\n"
	if d := cmp.Diff(want, r.FailureLines()); d != "" {
		t.Errorf("failures (-want +got):\n%s", d)
	}
}

var notRunWebhook = Allowed{Runs: []string{"e2e"}, Package: "e2e", Test: "TestOnlyOnKind", NotRun: true, Reason: "its TestMain leaves it to make e2e-kind"}

func TestReportFailsOnAListedTestThatNeverRan(t *testing.T) {
	type verdict struct {
		NotRun   []string
		Stale    []string
		Problems []string
	}
	listed := map[string][]string{"e2e": {"TestA", "TestOnlyOnKind", "BenchmarkA", "FuzzA", "ExampleA"}}
	tests := []struct {
		name   string
		args   []string // go test's
		listed map[string][]string
		lines  [][]string
		want   verdict
	}{
		{
			name:   "every listed test, fuzz target and example ran: benchmarks are not expected",
			listed: map[string][]string{"pkg/fence": {"TestA", "BenchmarkA", "FuzzA", "ExampleA"}},
			lines:  [][]string{passed("pkg/fence", "TestA"), passed("pkg/fence", "FuzzA"), passed("pkg/fence", "ExampleA")},
			want:   verdict{},
		},
		{
			name:   "a listed test that never ran fails the run",
			listed: map[string][]string{"pkg/fence": {"TestA", "TestB"}},
			lines:  [][]string{passed("pkg/fence", "TestA")},
			want: verdict{NotRun: []string{"pkg/fence TestB NOT ALLOWED"}, Problems: []string{
				`pkg/fence TestB never ran: go test -list names it, and allowed-skips.yaml has no notRun entry for it in run "e2e"`}},
		},
		{
			name:   "a test that never ran is allowed by a notRun entry of this run",
			listed: listed,
			lines:  [][]string{passed("e2e", "TestA"), passed("e2e", "FuzzA"), passed("e2e", "ExampleA")},
			want:   verdict{NotRun: []string{"e2e TestOnlyOnKind allowed"}},
		},
		{
			name:   "a test that skipped or failed ran",
			listed: map[string][]string{"pkg/fence": {"TestA", "TestB"}},
			lines:  [][]string{skipped("pkg/fence", "TestA", "why"), {ev("run", "pkg/fence", "TestB", ""), ev("fail", "pkg/fence", "TestB", "")}},
			want:   verdict{Problems: []string{`pkg/fence TestA skipped and is not in allowed-skips.yaml for run "e2e"`}},
		},
		{
			name:   "a notRun entry whose test ran is stale",
			listed: listed,
			lines:  [][]string{passed("e2e", "TestA"), passed("e2e", "TestOnlyOnKind"), passed("e2e", "FuzzA"), passed("e2e", "ExampleA")},
			want: verdict{Stale: []string{"e2e TestOnlyOnKind"}, Problems: []string{
				`e2e TestOnlyOnKind is a notRun entry of allowed-skips.yaml for run "e2e" but ran: remove the entry`}},
		},
		{
			name:   "a notRun entry of a test go test -list does not name is stale",
			listed: map[string][]string{"e2e": {"TestA"}},
			lines:  [][]string{passed("e2e", "TestA")},
			want: verdict{Stale: []string{"e2e TestOnlyOnKind"}, Problems: []string{
				`e2e TestOnlyOnKind is a notRun entry of allowed-skips.yaml for run "e2e" but go test -list does not name it: remove the entry`}},
		},
		{
			name:   "-run narrows what is expected as it narrows what runs, notRun entries included",
			args:   []string{"-count=1", "-run", "^TestA$|Fuzz", "./..."},
			listed: listed,
			lines:  [][]string{passed("e2e", "TestA"), passed("e2e", "FuzzA")},
			want:   verdict{},
		},
		{
			name:   "-run that selects no listed test fails the run: it tested nothing",
			args:   []string{"-run=XYZ", "./..."},
			listed: listed,
			want: verdict{Problems: []string{
				`none of the 4 listed tests is expected to run (those -run "XYZ" selects): the run tests nothing`}},
		},
		{
			name:   "the tests of a package that failed are not judged one by one",
			listed: map[string][]string{"e2e": {"TestA", "TestB"}},
			lines:  [][]string{{ev("output", "e2e", "", "setup failed\n"), ev("fail", "e2e", "", "")}},
			want:   verdict{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			_, filter := GoTestArgs(tt.args)
			r := &Report{Module: module, Run: "e2e", Allow: []Allowed{notRunWebhook}, Out: &out, Filter: filter, Listed: tt.listed}
			r.Line(ev("start", "e2e", "", "")) // go test's first event for a package
			for _, ls := range tt.lines {
				for _, l := range ls {
					r.Line(l)
				}
			}
			got := verdict{Problems: r.Summary("allowed-skips.yaml")}
			missing, stale := r.NotRun()
			for _, m := range missing {
				v := "NOT ALLOWED"
				if m.Allowed != nil {
					v = "allowed"
				}
				got.NotRun = append(got.NotRun, m.Package+" "+m.Test+" "+v)
			}
			for _, a := range stale {
				got.Stale = append(got.Stale, a.Package+" "+a.Test)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("(-want +got):\n%s\noutput:\n%s", d, out.String())
			}
		})
	}
}

func TestRunAndSkipSelectTopLevelNamesAsGoTestDoes(t *testing.T) {
	names := []string{"TestA", "TestAB", "TestB", "FuzzA", "ExampleA", "BenchmarkA"}
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"no filter expects every test, fuzz target and example", []string{"./..."}, []string{"TestA", "TestAB", "TestB", "FuzzA", "ExampleA"}},
		{"-run is an unanchored regexp", []string{"-run", "TestA"}, []string{"TestA", "TestAB"}},
		{"-run's first level applies to top-level names", []string{"-run=TestB/some case"}, []string{"TestB"}},
		{"each alternative of -run is split at its own levels", []string{"-test.run", "TestA$/x|^TestB"}, []string{"TestA", "TestB"}},
		{"a '|' inside parentheses is not an alternative of the pattern", []string{"-run", "^(TestA|FuzzA)$"}, []string{"TestA", "FuzzA"}},
		{"-skip leaves out the top-level tests it matches", []string{"-skip", "^TestA"}, []string{"TestB", "FuzzA", "ExampleA"}},
		{"-skip with a second level skips subtests, not the test", []string{"-skip", "TestA/x"}, []string{"TestA", "TestAB", "TestB", "FuzzA", "ExampleA"}},
		{"-fuzz: fuzz targets are not expected to run their seed corpus", []string{"-fuzz", "FuzzA", "."}, []string{"TestA", "TestAB", "TestB", "ExampleA"}},
		{"-run '^$' with -bench expects nothing", []string{"-run", "^$", "-bench", "."}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, f := GoTestArgs(tt.args)
			var got []string
			for _, n := range names {
				if f.Expects(n) {
					got = append(got, n)
				}
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("expected (-want +got):\n%s", d)
			}
		})
	}
}

func TestGoTestListTakesTheRunsArgumentsWithoutTheSelection(t *testing.T) {
	list, f := GoTestArgs([]string{"-count=1", "-tags", "e2e", "-run", "TestA", "-timeout", "25m", "--skip=TestB", "./...", "-args", "-run", "x"})
	want := []string{"-count=1", "-tags", "e2e", "-timeout", "25m", "./...", "-args", "-run", "x"}
	if d := cmp.Diff(want, list); d != "" {
		t.Errorf("go test -list arguments (-want +got):\n%s", d)
	}
	if d := cmp.Diff(Filter{Run: "TestA", Skip: "TestB"}, f); d != "" {
		t.Errorf("filter (-want +got):\n%s", d)
	}
}

// go test -list is taken with the run's own tags, so it cannot see a test
// file that no run compiles (a mistyped //go:build line): every _test.go
// file must build without tags or with the -tags of a make target, and
// every such -tags must bring in some test file (a mistyped -tags).
func TestEveryTestFileBuildsUnderTheTagsOfARun(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	tagSets := map[string]int{"": 0} // -tags value: test files it brings in
	tagsRE := regexp.MustCompile(`-tags[= ]([\w.,]+)`)
	for line := range strings.Lines(string(mk)) {
		// Only the tags of what compiles tests: go test (the gotest macro),
		// go vet. A tool's build tags (promtool's remove_all_sd) are not.
		if !strings.Contains(line, "gotest") && !strings.Contains(line, " test ") && !strings.Contains(line, " vet ") {
			continue
		}
		for _, m := range tagsRE.FindAllStringSubmatch(line, -1) {
			tagSets[m[1]] = 0
		}
	}
	matches := func(path, tags string) bool {
		ctx := build.Default
		ctx.CgoEnabled = false // the Makefile's CGO_ENABLED=0
		ctx.BuildTags = strings.FieldsFunc(tags, func(r rune) bool { return r == ',' })
		ok, err := ctx.MatchFile(filepath.Dir(path), filepath.Base(path))
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	root, files := "../..", 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "bin" || d.Name() == "dist"):
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(path, "_test.go"):
			return nil
		}
		files++
		built := false
		for tags := range tagSets {
			if matches(path, tags) {
				built = true
				if tags != "" && !matches(path, "") {
					tagSets[tags]++
				}
			}
		}
		if !built {
			t.Errorf("%s builds under none of the tag sets the Makefile passes (none, -tags %s): its tests never compile; check its //go:build line", path, strings.Join(slices.Sorted(maps.Keys(tagSets))[1:], ", -tags "))
		}
		return nil
	})
	if err != nil || files == 0 {
		t.Fatalf("walking %s: %v, %d test files", root, err, files)
	}
	for tags, n := range tagSets {
		if tags != "" && n == 0 {
			t.Errorf("the Makefile passes -tags %s, which brings in no test file: mistyped?", tags)
		}
	}
}
