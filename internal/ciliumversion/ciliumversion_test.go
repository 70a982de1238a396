package ciliumversion

import (
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
