package ciliumversion

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestRequired(t *testing.T) {
	tests := []struct {
		name  string
		gomod string
		want  string
	}{
		{"a require block", "module x\n\nrequire (\n\tgithub.com/cilium/cilium v1.20.2\n\tsigs.k8s.io/json v0.1.0\n)\n", "v1.20.2"},
		{"a single-line require with a comment", "module x\nrequire github.com/cilium/cilium v1.21.0 // pinned\n", "v1.21.0"},
		{"an indirect requirement still pins", "require (\n\tgithub.com/cilium/cilium v1.20.3 // indirect\n)\n", "v1.20.3"},
		{"a replace line is not a require", "module x\nreplace github.com/cilium/cilium v1.20.2 => ../cilium\n", ""},
		{"another module with the same prefix is not Cilium", "require (\n\tgithub.com/cilium/cilium-cli v0.1.0\n)\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Required([]byte(tt.gomod), Module)
			if got != tt.want || (err != nil) != (tt.want == "") {
				t.Errorf("Parse = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// TestReadTheRepositoryPin reads the real pin: it must stay readable, and a
// Cilium release.
func TestReadTheRepositoryPin(t *testing.T) {
	v, err := Read("../..")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(v, "v1.") {
		t.Errorf("pinned Cilium version %q is not a v1 release", v)
	}
}

// hack/kind/cilium.sh runs a released Cilium image (CILIUM_IMAGE, as
// .github/workflows/e2e.yml does) against the pinned release's prediction:
// an image tagged with another release must be refused before anything is
// rendered, and the pinned release's must not be.
func TestCiliumScriptRefusesAnImageOfAnotherRelease(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	pinned, err := Read(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		tag     string
		refused bool
	}{{"v1.0.0", true}, {pinned, false}} {
		t.Run(tt.tag, func(t *testing.T) {
			bin := t.TempDir() // no helm here: a script that goes on to render fails there
			cmd := exec.Command(filepath.Join(root, "hack", "kind", "cilium.sh"))
			cmd.Env = append(os.Environ(), "CILIUM_IMAGE=quay.io/cilium/cilium:"+tt.tag, "BIN="+bin)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			_ = cmd.Run()
			refusal := "is tagged " + tt.tag + ", but the suite predicts reach with Cilium " + pinned
			if got := strings.Contains(out.String(), refusal); got != tt.refused {
				t.Errorf("cilium.sh with CILIUM_IMAGE tagged %s: refused = %t, want %t\n%s", tt.tag, got, tt.refused, out.String())
			}
			if tt.refused && (cmd.ProcessState.ExitCode() != 1 || strings.Contains(out.String(), "cilium: rendering")) {
				t.Errorf("cilium.sh went on after refusing (exit %d):\n%s", cmd.ProcessState.ExitCode(), out.String())
			}
		})
	}
}
