package admit

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// OwnerKind is one of the two objects a per-sandbox policy may belong to:
// the SandboxClaim of the pooled path or the Sandbox of the
// pool-less path.
type OwnerKind struct {
	GVK schema.GroupVersionKind
	// PodLabelsPath is where the host writes the claim-time pod labels.
	PodLabelsPath []string
}

var (
	// ClaimOwner is extensions.agents.x-k8s.io/v1beta1 SandboxClaim.
	ClaimOwner = OwnerKind{
		GVK:           fence.SandboxClaimGVK,
		PodLabelsPath: []string{"spec", "additionalPodMetadata", "labels"},
	}
	// SandboxOwner is agents.x-k8s.io/v1beta1 Sandbox.
	SandboxOwner = OwnerKind{
		GVK:           fence.SandboxGVK,
		PodLabelsPath: []string{"spec", "podTemplate", "metadata", "labels"},
	}
	// OwnerKinds are both, in the order the uniqueness check reports them.
	OwnerKinds = []OwnerKind{ClaimOwner, SandboxOwner}
)

// String is "<apiVersion>, Kind=<kind>", the form the API server prints.
func (k OwnerKind) String() string { return k.GVK.GroupVersion().String() + ", Kind=" + k.GVK.Kind }

// ownerKindFor returns the owner kind of the PAIR apiVersion/kind: a
// SandboxClaim kind with the Sandbox group (or the reverse) is no owner,
// which is why the two are matched together, never one by one.
func ownerKindFor(apiVersion, kind string) (OwnerKind, bool) {
	for _, k := range OwnerKinds {
		if k.GVK.GroupVersion().String() == apiVersion && k.GVK.Kind == kind {
			return k, true
		}
	}
	return OwnerKind{}, false
}

// PodLabels returns the claim-time pod labels of obj, a live object of kind
// k; a missing or mistyped map reads as none.
func (k OwnerKind) PodLabels(obj *unstructured.Unstructured) map[string]string {
	m, _, err := unstructured.NestedStringMap(obj.Object, k.PodLabelsPath...)
	if err != nil {
		return nil
	}
	return m
}

// Expected is what ValidateCiliumOwner admits an owner for: its uid and the
// per-sandbox pod label it must carry. A lookup that answers from a cache
// uses it to tell a copy that settles the verdict from one it must confirm
// live.
type Expected struct {
	UID types.UID
	// LabelKey=LabelValue is the pod label; an empty LabelKey expects none.
	LabelKey, LabelValue string
}

// OwnerLookup reads owners from the cluster. Implementations return an error
// for which apierrors.IsNotFound is true when the object does not exist, and
// an error wrapping context.DeadlineExceeded when ctx expired first.
type OwnerLookup interface {
	// GetOwner returns the live object of kind k named name in namespace.
	// want is what the caller expects: a cached answer that disagrees with
	// it (or a cache miss) must be confirmed with a live read, so that
	// informer lag never refuses an owner created or recreated a moment ago.
	GetOwner(ctx context.Context, k OwnerKind, namespace, name string, want Expected) (*unstructured.Unstructured, error)
	// OwnersLabelled returns the objects of kind k in namespace whose pods
	// carry the label key=value (the uniqueness check's question). The
	// webhook answers it from an index of its cache, so its cost follows
	// the owners that share the label, not every owner of the namespace.
	OwnersLabelled(ctx context.Context, k OwnerKind, namespace, key, value string) ([]unstructured.Unstructured, error)
}

// PodLabelPair is how one pod label is indexed and looked up: key=value
// (neither part of a valid label can hold "=").
func PodLabelPair(key, value string) string { return key + "=" + value }

// PodLabelPairs returns obj's claim-time pod labels as PodLabelPair values,
// the index an OwnerLookup answers OwnersLabelled from.
func (k OwnerKind) PodLabelPairs(obj *unstructured.Unstructured) []string {
	labels := k.PodLabels(obj)
	out := make([]string, 0, len(labels))
	for key, value := range labels {
		out = append(out, PodLabelPair(key, value))
	}
	return out
}

// Labelled keeps the items of kind k whose pods carry key=value: for the
// OwnerLookups that list a whole namespace (kubectl fence, tests).
func (k OwnerKind) Labelled(items []unstructured.Unstructured, key, value string) []unstructured.Unstructured {
	var out []unstructured.Unstructured
	for i := range items {
		if got, ok := k.PodLabels(&items[i])[key]; ok && got == value {
			out = append(out, items[i])
		}
	}
	return out
}
