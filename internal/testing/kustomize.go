package testing

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sandbox-fence/sandbox-fence/internal/reporoot"
	"github.com/sandbox-fence/sandbox-fence/internal/yamldocs"
)

// Kustomize builds the kustomization in dir with `kubectl kustomize`, the
// kustomize an admin's `kubectl apply -k` runs, and returns the objects in
// the order it prints them.
//
// Why a process and not kustomize's Go API (krusty): this module is what a
// host imports for pkg/fence, and every module its tests import is in the
// host's module graph (its go.mod lists them). Rendering through the
// control plane's kubectl, which make tools builds into bin/ from the
// harness's modules, keeps kustomize and its dependencies out of that
// graph (hack/consumer checks it). The kubectl is the pinned release's,
// whose kustomize is the one that release's users run.
func Kustomize(t testing.TB, dir string) []*unstructured.Unstructured {
	t.Helper()
	kubectl, err := kubectl()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), kubectl, "kustomize", dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr.String())
	}
	objs, err := yamldocs.Decode(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("kubectl kustomize %s printed what is not YAML objects: %v", dir, err)
	}
	return objs
}

// kubectl is bin/kubectl of the checkout the test runs in (the pinned
// release's; e2e/framework.Kubectl picks the suite's chosen release).
func kubectl() (string, error) {
	return Tool("kubectl", "the control plane's kubectl: run make tools (it builds it from the Go module proxy, cached in bin/)")
}

// Tool is the path of bin/<name> in the checkout; why says what it is and
// which make target builds it, for the error when it is missing.
func Tool(name, why string) (string, error) {
	root, err := reporoot.Find()
	if err != nil {
		return "", err
	}
	p := filepath.Join(root, "bin", name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("needs %s, %s: %w", p, why, err)
	}
	return p, nil
}
