package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

const module = "github.com/sandbox-fence/sandbox-fence"

// yamlReaders are the packages whose tests read the shipped YAML (the
// policies, or config/ which includes them), in the order they run for a
// mutant of a policy. A mutant of the webhook configuration starts with
// internal/webhook. TestYAMLReadersAreComplete fails when a package's tests
// read config/ or policies/ and it is missing here.
var yamlReaders = []string{"policies", "internal/enforcement", "internal/fencectl", "internal/webhook", "cmd/webhook", "config"}

// testOrder is, by package, the tests run before and after the others: the
// policy cases kill most policy mutants in seconds, where the whole package
// takes two minutes, and TestCELCost alone takes more than half of that, so
// it runs last. A stage that fails kills the mutant (no later stage runs);
// when one passes, the next runs, and the middle stage runs every test the
// others do not name (-test.skip of all their names), so no test of the
// package is ever left out of a verdict of survival.
var testOrder = map[string]struct{ first, last string }{
	"policies": {first: "^TestPolicyCases$", last: "^TestCELCost$"},
}

// textTests compare what a shipped file says with a copy of it (decoded,
// so the neutral edit below, a comment, does not reach them): they fail on
// any change to the values they copy, so a mutant only they catch has no
// test of what the rule does, and still counts as surviving (the table
// names them). Keys are "<package> <test>"; a subtest counts as its test.
var textTests = map[string]string{
	"internal/webhook TestShippedWebhookConfiguration": "compares the webhook entries with a copy of the shipped YAML",
}

func isTextTest(pkg, test string) bool {
	top, _, _ := strings.Cut(test, "/")
	_, ok := textTests[pkg+" "+top]
	return ok
}

// neutralEdit is src with a comment added at its top: the same meaning,
// other bytes and every line moved down one. A test that fails on it fails
// on any change to the file (a byte-for-byte comparison with a generated
// copy, a line number), so it is no test of a rule: for each mutated file
// the tests it fails, run as the mutant's are, are not credited with
// killing that file's mutants.
func neutralEdit(file string, src []byte) []byte {
	c := "# mutation check: a neutral edit, no meaning changed\n"
	if strings.HasSuffix(file, ".go") {
		// A blank line after it, so the package's doc comment stays its own.
		c = "// mutation check: a neutral edit, no meaning changed\n\n"
	}
	return append([]byte(c), src...)
}

// workspace is the temporary copy the mutants are applied to.
type workspace struct {
	root, tmp, src string
	keep           bool
	testreport     string
	// binaries are the unmutated test binaries, by package; passed the
	// runs of them that passed, by "<package> <stage>".
	binaries map[string]string
	passed   map[string]bool
	// goReaders are, by package, the packages whose tests link it.
	goReaders map[string][]string
	log       io.Writer
	n         int
	// neutral holds, by "<file> <package> <stage>", the tests the neutral
	// edit of the file fails in that run; neutralBins the package's test
	// binary with a Go file's neutral edit, by "<file> <package>".
	neutral     map[string][]string
	neutralBins map[string]string
}

func newWorkspace(root string, keep bool) (*workspace, error) {
	tmp, err := os.MkdirTemp("", "sandbox-fence-mutants-")
	if err != nil {
		return nil, err
	}
	w := &workspace{root: root, tmp: tmp, src: filepath.Join(tmp, "src"), keep: keep, binaries: map[string]string{}, passed: map[string]bool{}, log: os.Stdout,
		neutral: map[string][]string{}, neutralBins: map[string]string{}}
	if err := w.copyRepo(); err != nil {
		w.close()
		return nil, err
	}
	for _, d := range []string{"bin", "logs", "overlay"} {
		if err := os.MkdirAll(filepath.Join(tmp, d), 0o755); err != nil {
			return nil, err
		}
	}
	w.testreport = filepath.Join(tmp, "bin", "testreport")
	if err := w.goCmd(nil, "-C", "hack", "build", "-o", w.testreport, "./testreport"); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

func (w *workspace) close() {
	if w.keep {
		fmt.Fprintf(w.log, "mutants: kept %s\n", w.tmp)
		return
	}
	os.RemoveAll(w.tmp)
}

// copyRepo copies the files git knows (tracked, and untracked but not
// ignored, so a test being written counts) and links bin/, where the e2e
// suite finds the control plane.
func (w *workspace) copyRepo() error {
	out, err := exec.Command("git", "-C", w.root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		return fmt.Errorf("git ls-files: %w", err)
	}
	for _, f := range strings.Split(string(out), "\x00") {
		if f == "" {
			continue
		}
		from := filepath.Join(w.root, f)
		st, err := os.Lstat(from)
		if os.IsNotExist(err) {
			continue // deleted in the work tree
		}
		if err != nil {
			return err
		}
		to := filepath.Join(w.src, f)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		if st.Mode()&os.ModeSymlink != 0 {
			l, err := os.Readlink(from)
			if err != nil {
				return err
			}
			if err := os.Symlink(l, to); err != nil {
				return err
			}
			continue
		}
		b, err := os.ReadFile(from)
		if err != nil {
			return err
		}
		if err := os.WriteFile(to, b, st.Mode().Perm()); err != nil {
			return err
		}
	}
	if _, err := os.Stat(filepath.Join(w.root, "bin")); err == nil {
		return os.Symlink(filepath.Join(w.root, "bin"), filepath.Join(w.src, "bin"))
	}
	return nil
}

func (w *workspace) goCmd(env []string, args ...string) error {
	cmd := exec.Command("go", args...)
	cmd.Dir = w.src
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// listGoReaders maps each package to the packages whose test binaries link
// it (itself first), from go list: the tests that can see a Go mutant.
func (w *workspace) listGoReaders() error {
	cmd := exec.Command("go", "list", "-test", "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}", "./...")
	cmd.Dir = w.src
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go list: %w", err)
	}
	w.goReaders = map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || !strings.HasSuffix(f[0], ".test") {
			continue
		}
		tested := strings.TrimPrefix(strings.TrimPrefix(strings.TrimSuffix(f[0], ".test"), module), "/")
		if strings.HasPrefix(tested, "e2e") || strings.HasPrefix(tested, "hack/") {
			continue // the e2e suite runs separately; the tools test themselves
		}
		for _, d := range f[1:] {
			d, _, _ = strings.Cut(d, " ")
			if p, ok := strings.CutPrefix(d, module+"/"); ok && !slices.Contains(w.goReaders[p], tested) {
				w.goReaders[p] = append(w.goReaders[p], tested)
			}
		}
	}
	// The package's own tests first, then the others by name.
	for p, rs := range w.goReaders {
		sort.Strings(rs)
		if k := slices.Index(rs, p); k > 0 {
			copy(rs[1:k+1], rs[:k])
			rs[0] = p
		}
	}
	return sc.Err()
}

// readers are the packages whose tests can see m, in the order they run.
func (w *workspace) readers(m Mutant) []string {
	if m.Go {
		return w.goReaders[filepath.Dir(m.File)]
	}
	rs := slices.Clone(yamlReaders)
	if strings.HasPrefix(m.File, "config/webhook/") {
		rs = append([]string{"internal/webhook"}, slices.DeleteFunc(rs, func(p string) bool { return p == "internal/webhook" })...)
	}
	return rs
}

// compile builds pkg's test binary (with overlay, when set) into path.
func (w *workspace) compile(pkg, path, overlay string, tags ...string) error {
	// No symbol table or DWARF: the binaries only run, and linking is most of
	// a Go mutant's cost.
	args := []string{"test", "-c", "-ldflags=-s -w", "-o", path}
	if overlay != "" {
		args = append(args, "-overlay", overlay)
	}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	dir, rel := w.moduleOf(pkg)
	return w.goCmd(nil, append(append([]string{"-C", dir}, args...), rel)...)
}

// moduleOf is the directory (from the repository root) of the module that
// holds pkg, the nearest go.mod at or above it (the e2e suite and the tools
// are modules of their own, docs/modules.md), and pkg's directory relative
// to it.
func (w *workspace) moduleOf(pkg string) (dir, rel string) {
	dir = pkg
	for dir != "." {
		if _, err := os.Stat(filepath.Join(w.src, dir, "go.mod")); err == nil {
			break
		}
		dir = filepath.Dir(dir)
	}
	r, _ := filepath.Rel(dir, pkg)
	if r == "." {
		return dir, "."
	}
	return dir, "./" + r
}

// runTests runs a compiled test binary in its package directory through
// test2json and hack/testreport, and returns the failed tests.
func (w *workspace) runTests(pkg, binary, runName, logName string, env []string, args ...string) ([]string, error) {
	w.n++
	base := filepath.Join(w.tmp, "logs", fmt.Sprintf("%03d-%s", w.n, logName))
	failures := base + ".failures"
	logf, err := os.Create(base + ".log")
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	t2j := exec.Command("go", append([]string{"tool", "test2json", "-t", "-p", module + "/" + pkg, binary, "-test.v=test2json", "-test.count=1"}, args...)...)
	t2j.Dir = filepath.Join(w.src, pkg)
	t2j.Env = append(os.Environ(), env...)
	t2j.Stderr = logf
	rep := exec.Command(w.testreport, "-run", runName, "-allow", filepath.Join(w.src, "hack/testreport/allowed-skips.yaml"), "-failures", failures)
	rep.Dir = w.src
	rep.Stdout, rep.Stderr = logf, logf
	pipe, err := t2j.StdoutPipe()
	if err != nil {
		return nil, err
	}
	rep.Stdin = pipe
	if err := rep.Start(); err != nil {
		return nil, err
	}
	if err := t2j.Start(); err != nil {
		return nil, err
	}
	t2jErr := t2j.Wait()
	repErr := rep.Wait()
	b, err := os.ReadFile(failures)
	if err != nil {
		return nil, fmt.Errorf("%s: testreport wrote no failures file (%v, %v); log %s", pkg, t2jErr, repErr, base+".log")
	}
	var failed []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l == "" {
			continue
		}
		_, test, _ := strings.Cut(l, " ")
		failed = append(failed, test)
	}
	failed = leaves(failed)
	if t2jErr != nil && len(failed) == 0 {
		return nil, fmt.Errorf("%s: the test binary failed (%v) but testreport names no failed test; log %s", pkg, t2jErr, base+".log")
	}
	return failed, nil
}

// leaves drops a failed test whose subtest failed too: the subtest names
// the case.
func leaves(names []string) []string {
	var out []string
	for _, n := range names {
		parent := false
		for _, o := range names {
			if strings.HasPrefix(o, n+"/") {
				parent = true
				break
			}
		}
		if !parent {
			out = append(out, n)
		}
	}
	return out
}

func flat(pkg string) string { return strings.ReplaceAll(pkg, "/", "_") }

// runAll checks that the unmutated copy passes, then runs every mutant.
func (w *workspace) runAll(ms []Mutant, e2eMode string) ([]Result, error) {
	if err := w.listGoReaders(); err != nil {
		return nil, err
	}
	for _, m := range ms {
		if m.Equivalent == "" && len(w.readers(m)) == 0 {
			return nil, fmt.Errorf("%s: no package's tests can see %s", m.ID, m.File)
		}
	}

	results := make([]Result, len(ms))
	for i, m := range ms {
		results[i].Mutant = m
		if m.Equivalent != "" {
			continue
		}
		t := time.Now()
		if err := w.offline(&results[i], i); err != nil {
			return nil, err
		}
		verdict := "killed by " + results[i].Killer
		if results[i].Killer == "" {
			verdict = "not killed offline"
		}
		fmt.Fprintf(w.log, "[%d/%d] %-75s %s (%s)\n", i+1, len(ms), m.ID, verdict, time.Since(t).Round(100*time.Millisecond))
	}

	var alive []int
	for i, r := range results {
		if r.Survived() {
			alive = append(alive, i)
		}
	}
	if len(alive) == 0 {
		return results, nil
	}
	_, cpErr := os.Stat(filepath.Join(w.root, "bin", "kube-apiserver"))
	switch {
	case e2eMode == "off":
		// Not a survivor: the e2e suite may kill it (the full check, with
		// e2e, decides).
		for _, i := range alive {
			results[i].Undecided = true
		}
		return results, nil
	case cpErr != nil && e2eMode == "on":
		return nil, fmt.Errorf("-e2e on: no control plane in %s (make tools, or copy a built bin/)", filepath.Join(w.root, "bin"))
	case cpErr != nil:
		for _, i := range alive {
			results[i].NotRun = "e2e not run: no control plane in bin/ (make tools)"
		}
		return results, nil
	}
	for _, i := range alive {
		t := time.Now()
		if err := w.e2e(&results[i], i); err != nil {
			return nil, err
		}
		verdict := "killed by e2e"
		if results[i].Killer == "" {
			verdict = "SURVIVED"
		}
		fmt.Fprintf(w.log, "e2e %-75s %s (%s)\n", results[i].ID, verdict, time.Since(t).Round(time.Second))
	}
	return results, nil
}

// apply writes a YAML file's mutated content into the copy, or the overlay
// of a Go file; undo restores the copy.
func (w *workspace) apply(file string, content []byte, name string) (overlay string, undo func(), err error) {
	if strings.HasSuffix(file, ".go") {
		mut := filepath.Join(w.tmp, "overlay", name+".go")
		if err := os.WriteFile(mut, content, 0o644); err != nil {
			return "", nil, err
		}
		o, _ := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(w.src, file): mut}})
		overlay = filepath.Join(w.tmp, "overlay", name+".json")
		return overlay, func() {}, os.WriteFile(overlay, o, 0o644)
	}
	path := filepath.Join(w.src, file)
	orig, err := os.ReadFile(path)
	if err != nil {
		return "", nil, err
	}
	if err := os.WriteFile(path, content, 0o644); err != nil {
		return "", nil, err
	}
	return "", func() {
		if err := os.WriteFile(path, orig, 0o644); err != nil {
			panic(err)
		}
	}, nil
}

// baseline compiles pkg's test binary once, and requires each run of its
// tests (stage) to pass without any mutant before a mutant's run of it
// counts (a failing run would "kill" everything). Both happen when a mutant
// first needs them, so a package or a stage no mutant reaches costs
// nothing: a sample whose mutants TestPolicyCases kills never runs the
// rest of policies.
func (w *workspace) baseline(p string, k int, args []string) error {
	bin, ok := w.binaries[p]
	if !ok {
		t := time.Now()
		bin = filepath.Join(w.tmp, "bin", flat(p)+".test")
		if err := w.compile(p, bin, ""); err != nil {
			return err
		}
		w.binaries[p] = bin
		fmt.Fprintf(w.log, "compiled %s (%s)\n", p, time.Since(t).Round(100*time.Millisecond))
	}
	key := fmt.Sprintf("%s %d", p, k)
	if w.passed[key] {
		return nil
	}
	t := time.Now()
	failed, err := w.runTests(p, bin, "test-unit", fmt.Sprintf("baseline-%s-%d", flat(p), k), nil, args...)
	if err != nil {
		return err
	}
	if len(failed) > 0 {
		return fmt.Errorf("without any mutant, %s fails: %s; fix that first", p, strings.Join(failed, ", "))
	}
	w.passed[key] = true
	fmt.Fprintf(w.log, "baseline %s (run %d) passes without a mutant (%s)\n", p, k, time.Since(t).Round(100*time.Millisecond))
	return nil
}

func (w *workspace) offline(r *Result, i int) error {
	for _, p := range w.readers(r.Mutant) {
		killed, err := w.offlinePackage(r, i, p)
		if err != nil || killed {
			return err
		}
	}
	return nil
}

// offlinePackage runs p's tests with the mutant applied, in stages. A
// failed test is credited with the kill unless it compares text
// (textTests) or fails on the neutral edit of the mutated file too.
func (w *workspace) offlinePackage(r *Result, i int, p string) (killed bool, err error) {
	stages := stagesOf(p)
	if err := w.baseline(p, 0, stages[0]); err != nil {
		return false, err
	}
	bin := w.binaries[p]
	if r.Go {
		overlay, _, err := w.apply(r.File, r.Mutated, fmt.Sprintf("%03d", i))
		if err != nil {
			return false, err
		}
		bin = filepath.Join(w.tmp, "bin", "mutant.test")
		if err := w.compile(p, bin, overlay); err != nil {
			return false, fmt.Errorf("%s: the mutant does not compile (a generator bug): %w", r.ID, err)
		}
	}
	r.Ran = append(r.Ran, p)
	for k, args := range stages {
		if err := w.baseline(p, k, args); err != nil {
			return false, err
		}
		failed, err := w.runWith(r.File, r.Mutated, fmt.Sprintf("%03d", i), p, bin, fmt.Sprintf("m%03d-%s-%d", i, flat(p), k), args)
		if err != nil {
			return false, fmt.Errorf("%s: %w", r.ID, err)
		}
		if len(failed) == 0 {
			continue
		}
		neutral, err := w.neutralFailures(r.File, p, k, args)
		if err != nil {
			return false, err
		}
		var behaviour []string
		for _, f := range failed {
			switch {
			case isTextTest(p, f):
				r.NotCredited = appendNew(r.NotCredited, p+" "+f+" (compares text)")
			case coveredBy(neutral, f):
				r.NotCredited = appendNew(r.NotCredited, p+" "+f+" (fails on a neutral edit)")
			default:
				behaviour = append(behaviour, f)
			}
		}
		if len(behaviour) > 0 {
			r.Killer, r.Failed = p, behaviour
			return true, nil
		}
	}
	return false, nil
}

// stagesOf are the runs of p's tests, each a list of test binary flags.
func stagesOf(p string) [][]string {
	o, ok := testOrder[p]
	if !ok {
		return [][]string{nil}
	}
	return [][]string{{"-test.run=" + o.first}, {"-test.skip=" + o.first + "|" + o.last}, {"-test.run=" + o.last}}
}

// runWith runs p's tests (bin, compiled with the overlay of a Go file)
// with file holding content for a YAML file, restoring it after.
func (w *workspace) runWith(file string, content []byte, name, p, bin, logName string, args []string) ([]string, error) {
	var undo func()
	if !strings.HasSuffix(file, ".go") {
		var err error
		if _, undo, err = w.apply(file, content, name); err != nil {
			return nil, err
		}
		defer undo()
	}
	return w.runTests(p, bin, "test-unit", logName, nil, args...)
}

// neutralFailures are the tests of p's stage k that fail on the neutral
// edit of file, computed once per file, package and stage, and only when a
// mutant of the file failed a test there.
func (w *workspace) neutralFailures(file, p string, k int, args []string) ([]string, error) {
	key := fmt.Sprintf("%s %s %d", file, p, k)
	if f, ok := w.neutral[key]; ok {
		return f, nil
	}
	orig, err := os.ReadFile(filepath.Join(w.src, file))
	if err != nil {
		return nil, err
	}
	content := neutralEdit(file, orig)
	name := "neutral-" + flat(file)
	bin := w.binaries[p]
	if strings.HasSuffix(file, ".go") {
		bkey := file + " " + p
		if bin = w.neutralBins[bkey]; bin == "" {
			overlay, _, err := w.apply(file, content, name)
			if err != nil {
				return nil, err
			}
			bin = filepath.Join(w.tmp, "bin", "neutral-"+flat(file)+"-"+flat(p)+".test")
			if err := w.compile(p, bin, overlay); err != nil {
				return nil, fmt.Errorf("the neutral edit of %s does not compile: %w", file, err)
			}
			w.neutralBins[bkey] = bin
		}
	}
	t := time.Now()
	failed, err := w.runWith(file, content, name, p, bin, fmt.Sprintf("neutral-%s-%s-%d", flat(file), flat(p), k), args)
	if err != nil {
		return nil, fmt.Errorf("the neutral edit of %s: %w", file, err)
	}
	w.neutral[key] = failed
	verdict := "fails none of its tests"
	if len(failed) > 0 {
		verdict = "fails " + strings.Join(failed, ", ") + ": not credited with kills"
	}
	fmt.Fprintf(w.log, "neutral edit of %s in %s (run %d) %s (%s)\n", file, p, k, verdict, time.Since(t).Round(100*time.Millisecond))
	return failed, nil
}

// neutralReport lists, by file, the tests that failed on its neutral edit.
func (w *workspace) neutralReport() map[string][]string {
	out := map[string][]string{}
	for key, failed := range w.neutral {
		file, rest, _ := strings.Cut(key, " ")
		p, _, _ := strings.Cut(rest, " ")
		for _, f := range failed {
			out[file] = appendNew(out[file], p+" "+f)
		}
	}
	for _, v := range out {
		sort.Strings(v)
	}
	return out
}

// coveredBy is true when test failed on the neutral edit too: the same
// test, one of its parents, or the package outside any test.
func coveredBy(neutral []string, test string) bool {
	for _, n := range neutral {
		if n == test || strings.HasPrefix(test, n+"/") || n == "(package)" {
			return true
		}
	}
	return false
}

func appendNew(s []string, v string) []string {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// e2e runs the whole e2e suite on the local control plane (stopping at the
// first failed test) with the mutant applied: the policies and webhook
// configuration the harness installs come from the copy, and a Go mutant
// reaches the webhook the harness builds through GOFLAGS.
func (w *workspace) e2e(r *Result, i int) error {
	overlay, undo, err := w.apply(r.File, r.Mutated, fmt.Sprintf("%03d", i))
	if err != nil {
		return err
	}
	defer undo()
	bin := filepath.Join(w.tmp, "bin", "e2e.test")
	var env []string
	if overlay != "" {
		bin = filepath.Join(w.tmp, "bin", "e2e-mutant.test")
		if err := w.compile("e2e", bin, overlay, "e2e"); err != nil {
			return err
		}
		env = append(env, "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -overlay="+overlay))
	} else if _, err := os.Stat(bin); err != nil {
		if err := w.compile("e2e", bin, "", "e2e"); err != nil {
			return err
		}
	}
	env = append(env, "E2E_PROVIDER=local", "E2E_ALLOW_PARTIAL=", "E2E_ENFORCER=")
	r.Ran = append(r.Ran, "e2e")
	failed, err := w.runTests("e2e", bin, "e2e", fmt.Sprintf("m%03d-e2e", i), env, "-test.failfast", "-test.timeout=25m")
	if err != nil {
		return fmt.Errorf("%s: %w", r.ID, err)
	}
	if len(failed) > 0 {
		r.Killer, r.Failed = "e2e", failed
	}
	return nil
}
