package reporoot

import (
	"os"
	"path/filepath"
	"testing"
)

// Find stops at the root module's go.mod, not at the nearest one: from a
// harness module (e2e/) it must still name the checkout's root.
func TestFindSkipsNestedModulesAndNamesTheRoot(t *testing.T) {
	root := t.TempDir()
	nested := filepath.Join(root, "e2e", "framework")
	if err := os.MkdirAll(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "go.mod"), "module "+Module+"\n\ngo 1.26.0\n")
	write(filepath.Join(root, "e2e", "go.mod"), "module "+Module+"/e2e\n\ngo 1.26.0\n")
	t.Chdir(nested)
	got, err := Find()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := filepath.EvalSymlinks(root)
	if g, _ := filepath.EvalSymlinks(got); g != want {
		t.Errorf("Find() = %s, want the root module's directory %s", got, root)
	}

	t.Chdir(t.TempDir())
	if _, err := Find(); err == nil {
		t.Error("Find() outside any checkout: no error")
	}
}
