package testing

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Render builds the kustomization dir (relative to the repository's config/
// directory, e.g. "webhook") plus the given components, as `kubectl apply -k`
// would, and returns the objects. It builds from a temporary kustomization
// that links config/, which is also how a user adds a component.
func Render(t testing.TB, configDir string, dir string, components ...string) []*unstructured.Unstructured {
	t.Helper()
	k := map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1beta1",
		"kind":       "Kustomization",
		"resources":  []string{"config/" + dir},
	}
	if len(components) > 0 {
		var cs []string
		for _, c := range components {
			cs = append(cs, "config/"+c)
		}
		k["components"] = cs
	}
	return RenderKustomization(t, configDir, k)
}

// RenderKustomization builds the kustomization k, whose paths name the
// repository's config/ directory as config/ (e.g. resources:
// [config/default]), as an admin's overlay beside a checkout would be built.
func RenderKustomization(t testing.TB, configDir string, k map[string]any) []*unstructured.Unstructured {
	t.Helper()
	abs, err := filepath.Abs(configDir)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	if err := os.Symlink(abs, filepath.Join(tmp, "config")); err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "kustomization.yaml"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return Kustomize(t, tmp)
}

// Find returns the rendered object of kind and name, converted into out.
func Find(t testing.TB, objs []*unstructured.Unstructured, kind, name string, out any) bool {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			b, err := yaml.Marshal(o.Object)
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.UnmarshalStrict(b, out); err != nil {
				t.Fatalf("%s/%s: %v", kind, name, err)
			}
			return true
		}
	}
	return false
}
