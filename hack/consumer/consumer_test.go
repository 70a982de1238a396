// Package consumer_test is a host's view of pkg/fence, the host library: a
// throwaway module that imports it, tidied as a host would tidy it, whose
// module graph must hold nothing of the webhook's, the policies' tests' or
// the harness's dependencies.
//
// Why the graph and not go.sum: module graph pruning keeps a host's go.sum
// small whatever pkg/fence requires, but every module in pkg/fence's go.mod
// still takes part in the host's version selection, so a heavy dependency
// there (k8s.io/apiserver, cel-go, kind) would raise the versions of what
// the host builds with and lists in `go list -m all`, in its vulnerability
// reports and its licence checks.
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

// fenceModule is the host library's module path.
const fenceModule = "github.com/sandbox-fence/sandbox-fence/pkg/fence"

// heavy names what a host must never take: the product module itself (the
// webhook, kubectl fence, the policies' tests), what it alone builds with,
// and the harness's heaviest dependencies.
var heavy = []string{
	"github.com/sandbox-fence/sandbox-fence", // the product module
	"k8s.io/apiserver",                       // the policies' offline evaluator (internal/vapeval)
	"github.com/google/cel-go",
	"sigs.k8s.io/controller-runtime",         // the webhook
	"sigs.k8s.io/kind",                       // the kind provider (e2e/provider)
	"github.com/google/go-containerregistry", // the daemonless image builder (hack/image)
	"sigs.k8s.io/kustomize/api",              // rendering config/ (hack/release, hack/chart)
	"helm.sh/helm/v3",                        // the chart's tests (hack/chart)
	"github.com/cilium/cilium",               // the egress proof (e2e/ciliumproof)
}

func TestAHostImportingPkgFenceTakesOnlyClientGoAndApimachinery(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("..", "..", "pkg", "fence"))
	if err != nil {
		t.Fatal(err)
	}
	host := t.TempDir()
	write(t, filepath.Join(host, "go.mod"), "module example.com/host\n\ngo 1.26.0\n\n"+
		"require "+fenceModule+" v0.0.0-00010101000000-000000000000\n\n"+
		"replace "+fenceModule+" => "+dir+"\n")
	// What a host uses: the Client, the Lease take-over, the fake for its
	// own tests.
	write(t, filepath.Join(host, "main.go"), `package main

import (
	"fmt"

	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence/fencelease"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence/fencetest"
)

func main() {
	var c fence.Interface = &fencetest.Fake{}
	fmt.Println(c, fencelease.TakeOver)
}
`)
	goCmd(t, host, "mod", "tidy")
	got := modules(t, host)
	for _, want := range []string{fenceModule, "k8s.io/client-go"} {
		if !slices.Contains(got, want) {
			t.Fatalf("the host's graph lacks %s: the throwaway module did not import pkg/fence\n%s", want, strings.Join(got, "\n"))
		}
	}
	var leaks []string
	for _, m := range got {
		if slices.Contains(heavy, m) {
			leaks = append(leaks, m)
		}
	}
	sort.Strings(leaks)
	if len(leaks) > 0 {
		t.Errorf("a host that imports pkg/fence has %d heavy modules in its module graph (go list -m all):\n  %s\n"+
			"pkg/fence/go.mod requires them: move what imports them out of pkg/fence, then go mod tidy there "+
			"(go mod why -m <module> names the importer)", len(leaks), strings.Join(leaks, "\n  "))
	}
	t.Logf("the host's graph: %d modules", len(got))
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
