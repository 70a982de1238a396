package testing

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
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
	kubectl, err := Kubectl()
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
	objs, err := decodeYAMLStream(out)
	if err != nil {
		t.Fatalf("kubectl kustomize %s printed what is not YAML objects: %v", dir, err)
	}
	return objs
}

// Kubectl is bin/kubectl of the checkout the test runs in.
func Kubectl() (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	p := filepath.Join(root, "bin", "kubectl")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("rendering config/ needs %s, the control plane's kubectl: run make tools (it builds it from the Go module proxy, cached in bin/): %w", p, err)
	}
	return p, nil
}

// rootModule is the go.mod line of the repository's root module.
const rootModule = "module github.com/sandbox-fence/sandbox-fence\n"

// repoRoot is the checkout's root: the directory of the root module's go.mod
// at or above the working directory (go test runs a test in its package's
// directory, in whichever of the repository's modules).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), rootModule) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("the sandbox-fence checkout's root (its go.mod) is not above the working directory")
		}
		dir = parent
	}
}

// decodeYAMLStream splits a multi-document YAML stream into objects,
// skipping empty documents.
func decodeYAMLStream(b []byte) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var out []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		o := &unstructured.Unstructured{}
		if err := utilyaml.Unmarshal(doc, &o.Object); err != nil {
			return nil, err
		}
		if len(o.Object) > 0 {
			out = append(out, o)
		}
	}
}
