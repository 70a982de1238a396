package webhook

import (
	"context"
	"slices"

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

// CachedNamespaces tells whether a host is bound in a namespace, reading the
// namespace's labels for a host bound by selector. Like CachedOwners, the
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

// Binds reports whether host is bound in namespace ns (contract §4.7):
// listed, or matched by its selector. A host without a selector is bound by
// its list alone and reads nothing.
func (n *CachedNamespaces) Binds(ctx context.Context, host *fencev1alpha1.Host, ns string) (bool, error) {
	if slices.Contains(host.Namespaces, ns) || host.NamespaceSelector == nil {
		return slices.Contains(host.Namespaces, ns), nil
	}
	m := NamespaceMeta()
	if err := n.Cache.Get(ctx, types.NamespacedName{Name: ns}, m); err == nil && host.Binds(ns, m.Labels) {
		return true, nil
	}
	m = NamespaceMeta()
	if err := n.Live.Get(ctx, types.NamespacedName{Name: ns}, m); err != nil {
		// A namespace that is gone binds nobody: its leftovers stay
		// deletable (contract §8.8), and writes there fail anyway.
		return false, client.IgnoreNotFound(err)
	}
	return host.Binds(ns, m.Labels), nil
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
