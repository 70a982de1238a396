// Package config_test renders the bundle as admins install it from a
// checkout (kustomize overlays over config/) and checks what must follow.
package config_test

import (
	"reflect"
	"strings"
	"testing"

	tst "github.com/sandbox-fence/sandbox-fence/internal/testing"
)

const (
	otherNamespace = "platform-admission"
	otherImage     = "registry.example/x/webhook@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

// Any namespace, any image, no YAML edits (docs/install.md, "Install into
// another namespace"): an overlay that sets namespace: and images: and lists
// config/transformers/namespace moves every reference, with self-managed
// certificates and with cert-manager's.
func TestAnyNamespaceAnyImage(t *testing.T) {
	for _, tc := range []struct {
		name      string
		resources []string
		in        tst.Install
	}{
		{"config/default", []string{"config/default"}, tst.Install{Namespace: otherNamespace, Image: otherImage}},
		{"cert-manager", []string{"config/vap", "config/webhook/overlays/cert-manager"}, tst.Install{Namespace: otherNamespace, Image: otherImage, CertManager: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			repo, digest, _ := strings.Cut(otherImage, "@")
			objs := tst.RenderKustomization(t, ".", map[string]any{
				"apiVersion":   "kustomize.config.k8s.io/v1beta1",
				"kind":         "Kustomization",
				"resources":    tc.resources,
				"namespace":    tc.in.Namespace,
				"images":       []map[string]string{{"name": "sandbox-fence/webhook", "newName": repo, "digest": digest}},
				"transformers": []string{"config/transformers/namespace"},
			})
			for _, b := range tst.InstallReferences(objs, tc.in) {
				t.Error(b)
			}
		})
	}
}

// The shipped rendering, checked the same way: the references agree with
// the default namespace and the dev image, and the transformer listed in an
// overlay that keeps the namespace changes nothing.
func TestDefaultInstallReferences(t *testing.T) {
	in := tst.Install{Namespace: tst.DefaultNamespace, Image: "sandbox-fence/webhook:dev"}
	def := tst.Render(t, ".", "default")
	for _, b := range tst.InstallReferences(def, in) {
		t.Error(b)
	}
	same := tst.RenderKustomization(t, ".", map[string]any{
		"resources":    []string{"config/default"},
		"transformers": []string{"config/transformers/namespace"},
	})
	if len(same) != len(def) {
		t.Fatalf("with the transformer: %d objects, without: %d", len(same), len(def))
	}
	for i := range def {
		if !reflect.DeepEqual(def[i].Object, same[i].Object) {
			t.Errorf("%s %s changed by config/transformers/namespace in the default namespace", def[i].GetKind(), def[i].GetName())
		}
	}
}
