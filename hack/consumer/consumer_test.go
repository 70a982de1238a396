// Package consumer_test is a host's view of the product module: a throwaway
// module that imports pkg/fence, tidied as a host would tidy it, whose module
// graph must hold nothing that only the harness (e2e/ and hack/, modules of
// their own) needs.
//
// Why the graph and not go.sum: module graph pruning keeps a host's go.sum
// small whatever the product module requires, but every module in the
// product's go.mod still takes part in the host's version selection, so a
// harness dependency there (kind, go-containerregistry, kustomize) would
// raise the versions of what the host builds with and lists in `go list -m
// all`, in its vulnerability reports and its licence checks.
package consumer_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// rootModule is the product module's path.
const rootModule = "github.com/sandbox-fence/sandbox-fence"

// harnessOnly names the harness's heaviest dependencies. Each must stay out
// of a host's graph even if the product module ever came to require it (the
// computed difference below would then no longer count it as the
// harness's).
var harnessOnly = []string{
	"sigs.k8s.io/kind",                       // the kind provider (e2e/provider)
	"github.com/google/go-containerregistry", // the daemonless image builder (hack/image)
	"golang.org/x/image",                     // the benchmark charts (e2e/bench/chart)
	"sigs.k8s.io/kustomize/api",              // rendering config/ (hack/release, hack/chart)
	"sigs.k8s.io/kustomize/kyaml",
	"helm.sh/helm/v3",          // the chart's test (hack/chart)
	"github.com/cilium/cilium", // the egress proof (e2e/ciliumproof)
}

// harnessModules are the directories, from the repository root, of the
// modules that only the project's own tests and tools build and whose whole
// graph the module proxy serves. e2e/ciliumproof's does not (Cilium's graph
// names module versions the proxy refuses; its build needs only the
// pruned part), so Cilium is named above instead.
var harnessModules = []string{"e2e", "hack", "hack/chart"}

func TestAHostImportingPkgFenceTakesNoHarnessModule(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	host := t.TempDir()
	write(t, filepath.Join(host, "go.mod"), "module example.com/host\n\ngo 1.26.0\n\n"+
		"require "+rootModule+" v0.0.0-00010101000000-000000000000\n\n"+
		"replace "+rootModule+" => "+root+"\n")
	// What a host does with the package: build the patch that stamps a
	// Sandbox, parse an epoch.
	write(t, filepath.Join(host, "main.go"), `package main

import (
	"fmt"

	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

func main() {
	e, err := fence.ParseEpoch("7")
	fmt.Println(e, err)
}
`)
	goCmd(t, host, "mod", "tidy")
	got := modules(t, host)
	if !slices.Contains(got, rootModule) {
		t.Fatalf("the host's graph lacks %s itself: the throwaway module did not import it\n%s", rootModule, strings.Join(got, "\n"))
	}

	product := map[string]bool{}
	for _, m := range modules(t, root) {
		product[m] = true
	}
	why := map[string]string{}
	for _, m := range harnessOnly {
		why[m] = "named as the harness's"
	}
	for _, dir := range harnessModules {
		for _, m := range modules(t, filepath.Join(root, dir)) {
			if !product[m] && !strings.HasPrefix(m, rootModule+"/") {
				if _, ok := why[m]; !ok {
					why[m] = "required only through " + dir + "/go.mod"
				}
			}
		}
	}
	if len(why) == len(harnessOnly) {
		t.Fatalf("no module is the harness's alone: the harness modules %v were not read", harnessModules)
	}
	var leaks []string
	for _, m := range got {
		if w, ok := why[m]; ok {
			leaks = append(leaks, m+" ("+w+")")
		}
	}
	sort.Strings(leaks)
	if len(leaks) > 0 {
		t.Errorf("a host that imports pkg/fence has %d of the harness's modules in its module graph (go list -m all):\n  %s\n"+
			"the product module (%s/go.mod) requires them: move what imports them into e2e/ or hack/, "+
			"then go mod tidy in the root (go mod why -m <module> names the importer)",
			len(leaks), strings.Join(leaks, "\n  "), root)
	}
	t.Logf("the host's graph: %d modules; the harness's alone: %d", len(got), len(why))
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// goCmd runs go in dir as a host's shell would: no workspace, module
// downloads allowed (through the module proxy, or the cache when warm).
func goCmd(t *testing.T, dir string, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, stderr.String())
	}
	return out
}

// modules is `go list -m all` in dir, by path. It reads dir's go.mod
// through a copy (-modfile), because listing the whole graph records the
// checksum of every go.mod in it, which would leave a tidy go.sum of the
// repository's untidy (make verify would then fail).
func modules(t *testing.T, dir string) []string {
	t.Helper()
	scratch := t.TempDir()
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil && !(f == "go.sum" && os.IsNotExist(err)) {
			t.Fatal(err)
		}
		write(t, filepath.Join(scratch, "list."+strings.TrimPrefix(f, "go.")), string(b))
	}
	var paths []string
	for l := range strings.Lines(string(goCmd(t, dir, "list", "-modfile="+filepath.Join(scratch, "list.mod"), "-m", "-f", "{{.Path}}", "all"))) {
		if p := strings.TrimSpace(l); p != "" {
			paths = append(paths, p)
		}
	}
	return paths
}
