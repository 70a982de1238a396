// Package tools_test keeps the project's Go modules on one version of every
// module they compile in common, so that a cold machine compiles each such
// package once.
//
// Why it matters: make sets CGO_ENABLED=0 and -trimpath for every go command
// (Makefile), the flags the control plane and the webhook image are built
// with, so a package compiled for the unit tests is the same build action as
// the one kube-apiserver, the kind node image's binaries, the webhook image
// and the chart module need, and the Go build cache serves it once. That
// holds only while every module resolves the package's module, and every
// module below it, to the same version: one differing golang.org/x/sys gives
// every package above it a new action ID, and a cold .ci/run compiles
// client-go, apiserver and their dependencies again.
package tools_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// nested names each module that compiles packages beside the root module
// (directory from the repository root) and the packages it builds. Left
// out: controller-gen, promtool, krew and cosign, which make builds with
// go install <package>@<version>, each on its own go.mod, and
// e2e/ciliumproof/reach, on Cilium's k8s.io.
var nested = []struct{ dir, pkgs string }{
	{"pkg/fence", "./..."},            // the host library (a module of its own)
	{"e2e", "./..."},                  // the e2e suite, the benchmarks, devcluster, the Cilium property test (the harness)
	{"hack", "./..."},                 // the image builder, release, the chart, testreport, mutants (the harness)
	{"hack/tools/kubernetes", "tool"}, // etcd, the control plane and the node image's binaries
}

func TestNestedModulesCompileTheRootsVersions(t *testing.T) {
	root := moduleVersions(t, "../..", "./...")
	for _, m := range nested {
		t.Run(m.dir, func(t *testing.T) {
			other := moduleVersions(t, filepath.Join("../..", m.dir), m.pkgs)
			var diffs []string
			for path, v := range other {
				if rv, ok := root[path]; ok && rv != v {
					diffs = append(diffs, fmt.Sprintf("%s %s (the root module: %s)", path, v, rv))
				}
			}
			sort.Strings(diffs)
			if len(diffs) > 0 {
				t.Errorf("%s compiles %d modules at another version than the root module does, so a cold build "+
					"compiles every package above them twice:\n  %s\nalign them: go get <module>@<higher version> "+
					"in the module that has the lower one (GOWORK=off), then go mod tidy",
					m.dir, len(diffs), strings.Join(diffs, "\n  "))
			}
		})
	}
}

// moduleVersions lists the module of every package that pkgs (and their
// tests) import, as go list resolves it in the module at dir: path to
// version (a replaced module's replacement version; a directory replacement,
// such as the root module in a nested one, has none). The main module and the
// standard library have none.
func moduleVersions(t *testing.T, dir, pkgs string) map[string]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-test", "-f", "{{with .Module}}{{if not .Main}}{{.Path}} {{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}{{end}}{{end}}", pkgs)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list -deps %s in %s: %v\n%s", pkgs, dir, err, stderr)
	}
	versions := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, v, ok := strings.Cut(line, " "); ok && v != "" {
			versions[path] = v
		}
	}
	if len(versions) == 0 {
		t.Fatalf("go list -deps %s in %s named no module", pkgs, dir)
	}
	return versions
}

// TestMakeBuildsEverythingInTheImagesConfiguration keeps the other half of
// the sharing: make exports the flags the webhook image (hack/image) and the
// control plane (build.sh) are built with, so go test compiles the same
// build actions they need.
func TestMakeBuildsEverythingInTheImagesConfiguration(t *testing.T) {
	// What a recipe's go command sees: a target defined on the command
	// line prints the environment make gives it.
	cmd := exec.Command("make", "-C", "../..", "-s", "--no-print-directory",
		"--eval", `sandbox-fence-goenv: ; @echo "$$CGO_ENABLED|$$GOFLAGS"`, "sandbox-fence-goenv")
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "CGO_ENABLED=") || strings.HasPrefix(kv, "GOFLAGS=")
	})
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make: %v", err)
	}
	cgo, goflags, _ := strings.Cut(strings.TrimSpace(string(out)), "|")
	if cgo != "0" {
		t.Errorf("make's go commands run with CGO_ENABLED=%q, want 0 (the image's and the control plane's setting)", cgo)
	}
	if !slices.Contains(strings.Fields(goflags), "-trimpath") {
		t.Errorf("make's go commands run with GOFLAGS=%q, want it to hold -trimpath (the image's and the control plane's flag)", goflags)
	}
}
