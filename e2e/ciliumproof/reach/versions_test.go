package main

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// TestTheK8sModulesAreCiliumsOwn: this module exists so that Cilium's
// policy repository builds against the k8s.io versions Cilium was released
// with (the package doc of e2e/ciliumproof says why). Every k8s.io module
// Cilium's go.mod requires must resolve here to the version it requires, so
// that a bump of either shows up as a failure, not as a build of Cilium no
// Cilium release was tested with.
func TestTheK8sModulesAreCiliumsOwn(t *testing.T) {
	gomod := run(t, "go", "list", "-m", "-f", "{{.GoMod}}", "github.com/cilium/cilium")
	var cilium struct {
		Module  struct{ Path, Version string }
		Require []struct{ Path, Version string }
	}
	if err := json.Unmarshal([]byte(run(t, "go", "mod", "edit", "-json", gomod)), &cilium); err != nil {
		t.Fatal(err)
	}
	var paths, want []string
	for _, r := range cilium.Require {
		if strings.HasPrefix(r.Path, "k8s.io/") {
			paths = append(paths, r.Path)
			want = append(want, r.Path+" "+r.Version)
		}
	}
	if len(paths) == 0 {
		t.Fatalf("%s requires no k8s.io module", gomod)
	}
	got := strings.Split(run(t, "go", append([]string{"list", "-m", "-f", "{{.Path}} {{.Version}}"}, paths...)...), "\n")
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s here, Cilium's go.mod requires %s: this module must build Cilium with Cilium's own k8s.io", got[i], want[i])
		}
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr)
	}
	return strings.TrimSpace(string(out))
}
