package webhook

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fence/sandbox-fence/internal/admit"
)

// PodLabelIndex is the cache index of owners by each claim-time pod label,
// as admit.PodLabelPair: CachedOwners.OwnersLabelled reads it, and
// cmd/webhook registers it with IndexPodLabels before the informers start.
const PodLabelIndex = "sandbox-fence.podLabel"

// IndexPodLabels returns the PodLabelIndex function for owners of kind k.
// It sees the objects as TrimOwner left them, which keeps the pod labels.
func IndexPodLabels(k admit.OwnerKind) client.IndexerFunc {
	return func(o client.Object) []string {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			return nil
		}
		return k.PodLabelPairs(u)
	}
}

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
