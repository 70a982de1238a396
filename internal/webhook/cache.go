package webhook

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/sandbox-fence/sandbox-fence/internal/admit"
)

// TrimOwner returns the informer transform for owners of kind k: it keeps
// only what the rules read (identity, deletionTimestamp, ownerReferences and
// the claim-time pod labels). The cache watches claims and Sandboxes in all
// namespaces, and a Sandbox carries a whole PodSpec; trimming keeps the
// webhook's memory proportional to the number of objects, not their size.
func TrimOwner(k admit.OwnerKind) toolscache.TransformFunc {
	return func(in any) (any, error) {
		u, ok := in.(*unstructured.Unstructured)
		if !ok {
			return in, nil
		}
		out := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": u.GetAPIVersion(),
			"kind":       u.GetKind(),
		}}
		if meta, ok := u.Object["metadata"].(map[string]any); ok {
			kept := map[string]any{}
			for _, f := range []string{"name", "namespace", "uid", "resourceVersion", "deletionTimestamp", "ownerReferences"} {
				if v, ok := meta[f]; ok {
					kept[f] = v
				}
			}
			out.Object["metadata"] = kept
		}
		if labels, found, err := unstructured.NestedFieldNoCopy(u.Object, k.PodLabelsPath...); err == nil && found {
			if err := unstructured.SetNestedField(out.Object, labels, k.PodLabelsPath...); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
}
