package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// make test is the README's "everything" and what CI runs: it refuses the
// settings that would make it check less (a partial bundle skips the cases
// of what is absent; another provider is not the local control plane the
// README describes; a peer enforcer skips the shipped bundle's own cases).
func TestMakeTestRefusesAPartialBundleAndAnotherProvider(t *testing.T) {
	tests := []struct {
		name    string
		env     []string
		wantErr string
	}{
		{"nothing set runs", nil, ""},
		{"the local provider runs", []string{"E2E_PROVIDER=local"}, ""},
		{"a partial bundle is refused", []string{"E2E_ALLOW_PARTIAL=1"}, "make test: E2E_ALLOW_PARTIAL=1 is refused"},
		{"any value of E2E_ALLOW_PARTIAL is refused", []string{"E2E_ALLOW_PARTIAL=0"}, "make test: E2E_ALLOW_PARTIAL=0 is refused"},
		{"the kind provider is refused", []string{"E2E_PROVIDER=kind"}, "make test: E2E_PROVIDER=kind is refused"},
		{"an existing cluster is refused", []string{"E2E_PROVIDER=kubeconfig"}, "make test: E2E_PROVIDER=kubeconfig is refused"},
		{"the shipped enforcer runs", []string{"E2E_ENFORCER=sandbox-fence"}, ""},
		{"a peer enforcer is refused", []string{"E2E_ENFORCER=kyverno"}, "make test: E2E_ENFORCER=kyverno is refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command("make", "-s", "-C", "..", "test-env")
			cmd.Env = append(withoutE2EEnv(os.Environ()), tt.env...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("make test-env: %v\n%s", err, out.String())
			case tt.wantErr != "" && (err == nil || !strings.Contains(out.String(), tt.wantErr)):
				t.Errorf("make test-env: %v, want a refusal with %q\n%s", err, tt.wantErr, out.String())
			}
		})
	}
}

func withoutE2EEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "E2E_PROVIDER=") && !strings.HasPrefix(kv, "E2E_ALLOW_PARTIAL=") && !strings.HasPrefix(kv, "E2E_ENFORCER=") && !strings.HasPrefix(kv, "MAKEFLAGS=") {
			out = append(out, kv)
		}
	}
	return out
}

// make help is the Makefile's table of contents: a target's description
// that names a variable shows its value, never the literal reference.
func TestMakeHelpExpandsTheVariablesItNames(t *testing.T) {
	out, err := exec.Command("make", "-s", "-C", "..", "help", "KIND_CLUSTER=kc-from-test").CombinedOutput()
	if err != nil {
		t.Fatalf("make help: %v\n%s", err, out)
	}
	if bytes.Contains(out, []byte("$(")) {
		t.Errorf("make help prints an unexpanded variable reference:\n%s", out)
	}
	if !bytes.Contains(out, []byte("kind cluster kc-from-test")) {
		t.Errorf("make help does not show KIND_CLUSTER's value in kind-load's description:\n%s", out)
	}
}
