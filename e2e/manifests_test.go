//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

// Every kustomization under config/ renders and the apiserver accepts every
// object it renders (--dry-run=server): CEL compiles, schemas validate,
// references resolve. Offline tests cannot catch a policy the server refuses
// at create time. A kustomize Component cannot render alone: it is rendered
// on top of the nearest kustomization above it, as its users would.
func TestEveryManifestUnderConfigIsAcceptedByTheServer(t *testing.T) {
	requireShipped(t)
	root := repoRoot(t)
	kubectl, err := framework.Kubectl(root)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	err = filepath.WalkDir(filepath.Join(root, "config"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Name() == "kustomization.yaml" {
			dirs = append(dirs, filepath.Dir(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Fatal("no kustomization.yaml under config/")
	}
	for _, dir := range dirs {
		rel, _ := filepath.Rel(root, dir)
		t.Run(rel, func(t *testing.T) {
			ctx := testContext(t)
			target := dir
			switch {
			case isComponent(t, dir):
				target = componentOnBase(t, root, dir)
			case isTransformer(t, dir):
				target = transformerOnDefault(t, root, dir)
			}
			objs, err := framework.Kustomize(ctx, kubectl, target)
			if err != nil {
				t.Fatal(err)
			}
			if len(objs) == 0 {
				t.Fatalf("%s renders no objects", rel)
			}
			ensureNamespaces(ctx, t, objs)
			var unserved []*unstructured.Unstructured
			var refused []error
			for _, o := range objs {
				err := env.DryRunCreateOrReplace(ctx, o)
				switch {
				case err == nil:
				case meta.IsNoMatchError(errors.Unwrap(err)) || strings.Contains(err.Error(), "no matches for kind"):
					unserved = append(unserved, o)
				default:
					refused = append(refused, err)
				}
			}
			if len(refused) > 0 {
				t.Errorf("server refused objects rendered from %s:\n%v", rel, errors.Join(refused...))
			}
			known, unknown := splitThirdParty(unserved)
			if len(unknown) > 0 {
				t.Errorf("%s renders objects of an API this cluster does not serve and that is not a known third-party API (a typo in apiVersion or kind?): %s", rel, strings.Join(unknown, ", "))
			}
			if len(known) > 0 && !t.Failed() {
				t.Skipf("every other object accepted; not checked, their API is not served by this cluster (a third-party CRD): %s", strings.Join(known, ", "))
			}
		})
	}
}

// thirdPartyAPIs are the only APIs under config/ that a cluster may not
// serve, on purpose: the cert-manager overlay's Issuer and Certificate. The
// suite's own clusters (local, kind) serve them, from cert-manager's CRDs
// (framework.CertManagerCRDs), so the overlay is checked whole there; a
// cluster given by its kubeconfig may have no cert-manager, and then the
// case skips. Any other object the server cannot map is a typo'd apiVersion
// or kind, and fails the test instead of skipping it.
var thirdPartyAPIs = map[string]bool{
	"cert-manager.io/v1 Issuer":      true,
	"cert-manager.io/v1 Certificate": true,
}

// splitThirdParty names the unserved objects, the known third-party ones
// apart from the rest.
func splitThirdParty(objs []*unstructured.Unstructured) (known, unknown []string) {
	for _, o := range objs {
		api := o.GetAPIVersion() + " " + o.GetKind()
		if thirdPartyAPIs[api] {
			known = append(known, api+" "+o.GetName())
		} else {
			unknown = append(unknown, api+" "+o.GetName())
		}
	}
	return known, unknown
}

func TestAnUnservedAPIIsATypoUnlessItIsAKnownThirdPartyAPI(t *testing.T) {
	obj := func(apiVersion, kind string) *unstructured.Unstructured {
		o := &unstructured.Unstructured{}
		o.SetAPIVersion(apiVersion)
		o.SetKind(kind)
		o.SetName("x")
		return o
	}
	known, unknown := splitThirdParty([]*unstructured.Unstructured{
		obj("cert-manager.io/v1", "Certificate"),
		obj("admissionregistration.k8s.io/v1beta2", "ValidatingAdmissionPolicy"),
		obj("cert-manager.io/v1", "Certificat"),
		obj("cert-manager.io/v1alpha2", "Issuer"),
	})
	want := [][]string{
		{"cert-manager.io/v1 Certificate x"},
		{"admissionregistration.k8s.io/v1beta2 ValidatingAdmissionPolicy x", "cert-manager.io/v1 Certificat x", "cert-manager.io/v1alpha2 Issuer x"},
	}
	if d := cmp.Diff(want, [][]string{known, unknown}); d != "" {
		t.Errorf("known, unknown (-want +got):\n%s", d)
	}
}

func isComponent(t *testing.T, dir string) bool {
	t.Helper()
	objs, err := framework.ReadYAMLFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return len(objs) == 1 && objs[0].GetKind() == "Component"
}

// isTransformer tells a directory of transformer configurations
// (config/transformers/...) from one of objects: it renders only builtin
// plugin configurations, which an overlay lists under transformers:.
func isTransformer(t *testing.T, dir string) bool {
	t.Helper()
	rel, err := filepath.Rel(filepath.Dir(filepath.Dir(dir)), dir)
	return err == nil && strings.HasPrefix(rel, "transformers"+string(filepath.Separator))
}

// transformerOnDefault writes the overlay config/transformers/namespace is
// made for: config/default moved into another namespace, the transformer
// listed after it.
func transformerOnDefault(t *testing.T, root, dir string) string {
	t.Helper()
	tmp := t.TempDir()
	relBase, _ := filepath.Rel(tmp, filepath.Join(root, "config", "default"))
	relTr, _ := filepath.Rel(tmp, dir)
	k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- %s\nnamespace: platform-admission\ntransformers:\n- %s\n", relBase, relTr)
	if err := os.WriteFile(filepath.Join(tmp, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return tmp
}

// componentOnBase writes a kustomization that applies the component at dir
// to the nearest non-component kustomization above it.
func componentOnBase(t *testing.T, root, dir string) string {
	t.Helper()
	base := filepath.Dir(dir)
	for ; strings.HasPrefix(base, root); base = filepath.Dir(base) {
		if _, err := os.Stat(filepath.Join(base, "kustomization.yaml")); err == nil && !isComponent(t, base) {
			break
		}
	}
	// The bundle-wide components (enforcement modes, monitoring) apply to
	// what an admin installs: config/default.
	if strings.HasPrefix(dir, filepath.Join(root, "config", "components")+string(filepath.Separator)) {
		base = filepath.Join(root, "config", "default")
	}
	if !strings.HasPrefix(base, root) {
		t.Fatalf("component %s has no kustomization above it to apply to", dir)
	}
	tmp, err := os.MkdirTemp("", "sandbox-fence-component-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	relBase, _ := filepath.Rel(tmp, base)
	relComp, _ := filepath.Rel(tmp, dir)
	k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- %s\ncomponents:\n- %s\n", relBase, relComp)
	if err := os.WriteFile(filepath.Join(tmp, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return tmp
}

// A dry-run namespace is not created, so namespaced objects of a bundle
// would fail on it: make sure the namespaces exist first.
func ensureNamespaces(ctx context.Context, t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "Namespace" {
			continue
		}
		_, err := env.Admin.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.GetName()}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}
