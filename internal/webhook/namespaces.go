package webhook

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
)

// NamespaceMeta is the object the namespace informer caches: metadata only
// (name and labels are all a selector reads), so the webhook's memory grows
// with the number of namespaces, not their contents. cmd/webhook registers
// its informer; CachedNamespaces reads it.
func NamespaceMeta() *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}}
}

// CachedNamespaces tells whether a host's namespaceSelector selects a
// namespace, reading the namespace's labels. Like CachedOwners, the
// cache answers only what it cannot get wrong: a namespace whose cached
// labels bind the host is checked (a check the host did not need only
// refuses what the egress policy refuses anyway, since the host's write
// there would be fenced a moment ago). Anything else is read live: a label
// a cluster admin set a moment ago binds the host for the egress policy
// already, and the owner check must not be skipped on a stale copy.
type CachedNamespaces struct {
	// Cache is the informer-backed reader (the manager's cache).
	Cache client.Reader
	// Live reads straight from the API server (NewLiveReader).
	Live client.Reader
}

// Selects reports whether sel selects namespace ns (contract §4.7), for a
// host its list does not bind there.
func (n *CachedNamespaces) Selects(ctx context.Context, sel *fencev1alpha1.NamespaceSelector, ns string) (bool, error) {
	m := NamespaceMeta()
	if err := n.Cache.Get(ctx, types.NamespacedName{Name: ns}, m); err == nil && sel.Matches(m.Labels) {
		return true, nil
	}
	m = NamespaceMeta()
	if err := n.Live.Get(ctx, types.NamespacedName{Name: ns}, m); err != nil {
		// A namespace that is gone binds nobody: its leftovers stay
		// deletable (contract §8.8), and writes there fail anyway.
		return false, client.IgnoreNotFound(err)
	}
	return sel.Matches(m.Labels), nil
}

// TrimNamespace is the namespace informer's transform: it keeps the name,
// resourceVersion and labels, all a selector reads; annotations (which can
// be large, kubectl's last-applied configuration among them) are dropped.
func TrimNamespace(in any) (any, error) {
	m, ok := in.(*metav1.PartialObjectMetadata)
	if !ok {
		return in, nil
	}
	return &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion, Labels: m.Labels}}, nil
}
