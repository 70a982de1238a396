//go:build e2e

package e2e

import (
	"io/fs"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

// Every kustomization under config/ renders and the apiserver accepts every
// object it renders (--dry-run=server): CEL compiles, schemas validate,
// references resolve. Offline tests cannot catch a policy the server refuses
// at create time.
func TestEveryManifestUnderConfigIsAcceptedByTheServer(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(root, "bin", "kubectl")
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
			objs, err := framework.Kustomize(ctx, kubectl, dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(objs) == 0 {
				t.Fatalf("%s renders no objects", rel)
			}
			// A dry-run namespace is not created, so namespaced objects of a
			// bundle would fail on it: make sure the namespaces exist first.
			for _, o := range objs {
				if o.GetKind() != "Namespace" {
					continue
				}
				_, err := env.Admin.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.GetName()}}, metav1.CreateOptions{})
				if err != nil && !apierrors.IsAlreadyExists(err) {
					t.Fatal(err)
				}
			}
			if err := env.Apply(ctx, objs, framework.ApplyOptions{DryRun: true, FieldManager: framework.FieldManager + "-dry-run"}); err != nil {
				t.Errorf("server refused objects rendered from %s:\n%v", rel, err)
			}
		})
	}
}
