package admit

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// OwnerKind is one of the two objects a per-sandbox policy may belong to
// (contract §4.1): the SandboxClaim of the pooled path or the Sandbox of the
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

// OwnerLookup reads owners from the cluster. Implementations return an error
// for which apierrors.IsNotFound is true when the object does not exist, and
// an error wrapping context.DeadlineExceeded when ctx expired first.
type OwnerLookup interface {
	// GetOwner returns the live object of kind k named name in namespace.
	// uid is the uid the caller expects: a cached answer that disagrees
	// with it (or a cache miss) must be confirmed with a live read, so that
	// informer lag never refuses an owner created or recreated a moment ago.
	GetOwner(ctx context.Context, k OwnerKind, namespace, name string, uid types.UID) (*unstructured.Unstructured, error)
	// ListOwners returns every object of kind k in namespace.
	ListOwners(ctx context.Context, k OwnerKind, namespace string) ([]unstructured.Unstructured, error)
}
