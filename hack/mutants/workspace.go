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

// firstStage is, by package, the tests run first: the policy cases kill most
// policy mutants in seconds, where the whole package takes half a minute
// (the cases in every mode, type checking against both CRD sets). When they
// fail the mutant is killed; when they pass, the package's other tests run
// (-test.skip of the same names), so no test of the package is ever left
// out of a verdict of survival.
var firstStage = map[string]string{
	"policies": "^TestPolicyCases$",
}

// textTests compare a shipped file with a copy of its text: they fail on
// any edit, so a mutant only they catch has no test of what the rule does,
// and still counts as surviving (the table names them). Keys are
// "<package> <test>"; a subtest counts as its test.
var textTests = map[string]string{
	"internal/webhook TestShippedWebhookConfiguration": "compares the webhook entries with a copy of the shipped YAML",
}

func isTextTest(pkg, test string) bool {
	top, _, _ := strings.Cut(test, "/")
	_, ok := textTests[pkg+" "+top]
	return ok
}

// workspace is the temporary copy the mutants are applied to.
type workspace struct {
	root, tmp, src string
	keep           bool
	testreport     string
	// binaries are the unmutated test binaries, by package.
	binaries map[string]string
	// goReaders are, by package, the packages whose tests link it.
	goReaders map[string][]string
	log       io.Writer
	n         int
}

func newWorkspace(root string, keep bool) (*workspace, error) {
	tmp, err := os.MkdirTemp("", "sandbox-fence-mutants-")
	if err != nil {
		return nil, err
	}
	w := &workspace{root: root, tmp: tmp, src: filepath.Join(tmp, "src"), keep: keep, binaries: map[string]string{}, log: os.Stdout}
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
		for _, i := range alive {
			results[i].NotRun = "e2e not run (-e2e off)"
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

// apply writes a YAML mutant into the copy, or the overlay of a Go mutant;
// undo restores the copy.
func (w *workspace) apply(m Mutant, i int) (overlay string, undo func(), err error) {
	if m.Go {
		mut := filepath.Join(w.tmp, "overlay", fmt.Sprintf("%03d.go", i))
		if err := os.WriteFile(mut, m.Mutated, 0o644); err != nil {
			return "", nil, err
		}
		o, _ := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(w.src, m.File): mut}})
		overlay = filepath.Join(w.tmp, "overlay", fmt.Sprintf("%03d.json", i))
		return overlay, func() {}, os.WriteFile(overlay, o, 0o644)
	}
	path := filepath.Join(w.src, m.File)
	orig, err := os.ReadFile(path)
	if err != nil {
		return "", nil, err
	}
	if err := os.WriteFile(path, m.Mutated, 0o644); err != nil {
		return "", nil, err
	}
	return "", func() {
		if err := os.WriteFile(path, orig, 0o644); err != nil {
			panic(err)
		}
	}, nil
}

// baseline compiles pkg's test binary once and requires it to pass without
// any mutant (a failing package would "kill" every mutant). It runs when a
// mutant first needs the package, so a package no mutant reaches costs
// nothing.
func (w *workspace) baseline(p string) error {
	if _, ok := w.binaries[p]; ok {
		return nil
	}
	t := time.Now()
	bin := filepath.Join(w.tmp, "bin", flat(p)+".test")
	if err := w.compile(p, bin, ""); err != nil {
		return err
	}
	failed, err := w.runTests(p, bin, "test-unit", "baseline-"+flat(p), nil)
	if err != nil {
		return err
	}
	if len(failed) > 0 {
		return fmt.Errorf("without any mutant, %s fails: %s; fix that first", p, strings.Join(failed, ", "))
	}
	w.binaries[p] = bin
	fmt.Fprintf(w.log, "baseline %s passes without a mutant (%s)\n", p, time.Since(t).Round(100*time.Millisecond))
	return nil
}

func (w *workspace) offline(r *Result, i int) error {
	for _, p := range w.readers(r.Mutant) {
		if err := w.baseline(p); err != nil {
			return err
		}
		killed, err := w.offlinePackage(r, i, p)
		if err != nil || killed {
			return err
		}
	}
	return nil
}

// offlinePackage runs p's tests with the mutant applied.
func (w *workspace) offlinePackage(r *Result, i int, p string) (killed bool, err error) {
	overlay, undo, err := w.apply(r.Mutant, i)
	if err != nil {
		return false, err
	}
	defer undo()
	bin := w.binaries[p]
	if r.Go {
		bin = filepath.Join(w.tmp, "bin", "mutant.test")
		if err := w.compile(p, bin, overlay); err != nil {
			return false, fmt.Errorf("%s: the mutant does not compile (a generator bug): %w", r.ID, err)
		}
	}
	r.Ran = append(r.Ran, p)
	stages := [][]string{nil}
	if re, ok := firstStage[p]; ok {
		stages = [][]string{{"-test.run=" + re}, {"-test.skip=" + re}}
	}
	for k, args := range stages {
		failed, err := w.runTests(p, bin, "test-unit", fmt.Sprintf("m%03d-%s-%d", i, flat(p), k), nil, args...)
		if err != nil {
			return false, fmt.Errorf("%s: %w", r.ID, err)
		}
		var behaviour []string
		for _, f := range failed {
			if isTextTest(p, f) {
				r.TextOnly = appendNew(r.TextOnly, p+" "+f)
			} else {
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
	overlay, undo, err := w.apply(r.Mutant, i)
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
