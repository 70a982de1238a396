package e2e

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

// go test runs a package's tests in the order of their files, then of
// their declarations. The start-up window case restarts kube-apiserver up
// to 20 times, and on kind a webhook pod's reads can hang for up to a
// minute after such restarts (RELIABILITY.md finding 8): the cases that
// count every refusal under load measure their own disruption only if they
// run before it. So it must be the last test of the suite.
func TestTheStartupWindowCaseRunsLast(t *testing.T) {
	if e := os.Getenv(framework.EnvEnforcer); e != "" && e != framework.ShippedEnforcer {
		t.Skipf("n/a: checks the suite's order, not a fence rule; %s=%s", framework.EnvEnforcer, e)
	}
	const last = "TestNamespaceDeletedThroughTheAPIServerStartupWindow"
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	var tests []string
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(src), "//go:build e2e") {
			continue // not part of the suite
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range testFuncs(file) {
			tests = append(tests, f+": "+name)
		}
	}
	if len(tests) == 0 || !strings.HasSuffix(tests[len(tests)-1], ": "+last) {
		t.Errorf("%s must be the suite's last test (its file sorts last, it is declared last there); the suite runs, in order, ending with: %q",
			last, tests[max(0, len(tests)-3):])
	}
}

// testFuncs are the top-level tests a file declares, in order.
func testFuncs(f *ast.File) []string {
	var out []string
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") && fn.Name.Name != "TestMain" {
			out = append(out, fn.Name.Name)
		}
	}
	return out
}
