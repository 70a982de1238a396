// Package testing holds the builder fixtures every test shares — the
// webhook's unit tests and, through e2e/framework, the end-to-end suite — so
// a test states only what differs from the host's canonical objects (its
// Sandbox, claim and per-sandbox policy) instead of repeating whole manifests. The objects are complete enough
// for a real API server to store.
package testing

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// Defaults the builders start from: the host's namespace and identity, and
// the contract's names (pkg/fence is their one definition).
const (
	Namespace = "sandboxes"
	HostUser  = "system:serviceaccount:sandboxes:sandbox-host"
	LabelKey  = fence.DefaultPerSandboxLabelKey
	// EpochKey is the holder-epoch annotation.
	EpochKey = fence.AnnotationHolderEpoch
)

// GroupVersionKinds of the objects the builders make.
var (
	ClaimGVK   = fence.SandboxClaimGVR.GroupVersion().WithKind(fence.OwnerKindSandboxClaim)
	SandboxGVK = fence.SandboxGVR.GroupVersion().WithKind(fence.OwnerKindSandbox)
	CNPGVK     = fence.CiliumNetworkPolicyGVR.GroupVersion().WithKind("CiliumNetworkPolicy")
)

// ObjectWrapper builds an unstructured object step by step.
type ObjectWrapper struct{ u *unstructured.Unstructured }

func newObject(gvk schema.GroupVersionKind, name string) *ObjectWrapper {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetGroupVersionKind(gvk)
	u.SetName(name)
	u.SetNamespace(Namespace)
	return &ObjectWrapper{u: u}
}

// MakeClaim returns the host's SandboxClaim named name in Namespace (a warm
// pool reference), with uid "uid-<name>" and, like the host's pooled path,
// the per-sandbox pod label LabelKey=<name> in
// spec.additionalPodMetadata.labels.
func MakeClaim(name string) *ObjectWrapper {
	w := newObject(ClaimGVK, name).UID("uid-"+name).Set("namzu-pool", "spec", "warmPoolRef", "name")
	return w.PodLabel(LabelKey, name)
}

// MakeSandbox returns the host's Sandbox named name in Namespace: Running, a
// podTemplate with the template label and one container, uid "uid-<name>"
// and, like the host's pool-less path, the per-sandbox pod label in
// spec.podTemplate.metadata.labels.
func MakeSandbox(name string) *ObjectWrapper {
	w := newObject(SandboxGVK, name).UID("uid-"+name).Mode("Running").
		Set([]any{map[string]any{"name": "main", "image": "namzu/agent:1"}}, "spec", "podTemplate", "spec", "containers").
		PodLabel(fence.LabelTemplate, "namzu-workspace")
	return w.PodLabel(LabelKey, name)
}

// MakeCNP returns the host's per-sandbox CiliumNetworkPolicy for
// the given owner object: name namzu-sbx-<uid>, one ownerReference, selector
// LabelKey=<owner name>, one DNS rule and one toFQDNs rule.
func MakeCNP(owner *unstructured.Unstructured) *ObjectWrapper {
	w := newObject(CNPGVK, fence.PolicyName(string(owner.GetUID())))
	w.u.SetOwnerReferences([]metav1.OwnerReference{{
		APIVersion: owner.GetAPIVersion(), Kind: owner.GetKind(), Name: owner.GetName(), UID: owner.GetUID(),
	}})
	w.u.Object["spec"] = map[string]any{
		"endpointSelector": map[string]any{"matchLabels": map[string]any{LabelKey: owner.GetName()}},
		"egress": []any{
			map[string]any{
				"toEndpoints": []any{map[string]any{"matchLabels": map[string]any{
					"k8s:io.kubernetes.pod.namespace": "kube-system", "k8s:k8s-app": "kube-dns"}}},
				"toPorts": []any{map[string]any{
					"ports": []any{map[string]any{"port": "53", "protocol": "ANY"}},
					"rules": map[string]any{"dns": []any{map[string]any{"matchPattern": "*"}}},
				}},
			},
			map[string]any{"toFQDNs": []any{map[string]any{"matchName": "registry.npmjs.org"}}},
		},
	}
	return w
}

// Namespace sets metadata.namespace.
func (w *ObjectWrapper) Namespace(ns string) *ObjectWrapper { w.u.SetNamespace(ns); return w }

// UID sets metadata.uid; "" removes it (an object to create, whose uid the
// API server assigns).
func (w *ObjectWrapper) UID(uid string) *ObjectWrapper {
	if uid == "" {
		unstructured.RemoveNestedField(w.u.Object, "metadata", "uid")
		return w
	}
	w.u.SetUID(types.UID(uid))
	return w
}

// Version sets the version of the apiVersion, keeping the group (v1alpha1
// exercises the deprecated served version).
func (w *ObjectWrapper) Version(v string) *ObjectWrapper {
	gvk := w.u.GroupVersionKind()
	gvk.Version = v
	w.u.SetGroupVersionKind(gvk)
	return w
}

// Mode sets a Sandbox's spec.operatingMode.
func (w *ObjectWrapper) Mode(m string) *ObjectWrapper { return w.Set(m, "spec", "operatingMode") }

// Kind overrides apiVersion and kind (to model a foreign or mismatched owner).
func (w *ObjectWrapper) Kind(apiVersion, kind string) *ObjectWrapper {
	w.u.SetAPIVersion(apiVersion)
	w.u.SetKind(kind)
	return w
}

// Deleting sets metadata.deletionTimestamp and a finalizer: an object
// being deleted exists only while a finalizer holds it.
func (w *ObjectWrapper) Deleting() *ObjectWrapper {
	now := metav1.Unix(1785574800, 0)
	w.u.SetDeletionTimestamp(&now)
	w.u.SetFinalizers(append(w.u.GetFinalizers(), "sandbox-fence.test/hold"))
	return w
}

// Label sets one metadata label (of the object itself, not its pods).
func (w *ObjectWrapper) Label(k, v string) *ObjectWrapper {
	l := w.u.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[k] = v
	w.u.SetLabels(l)
	return w
}

// Finalizer appends a metadata finalizer.
func (w *ObjectWrapper) Finalizer(f string) *ObjectWrapper {
	w.u.SetFinalizers(append(w.u.GetFinalizers(), f))
	return w
}

// Annotation sets one metadata annotation.
func (w *ObjectWrapper) Annotation(k, v string) *ObjectWrapper {
	a := w.u.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[k] = v
	w.u.SetAnnotations(a)
	return w
}

// Epoch sets the holder-epoch annotation to the raw string v.
func (w *ObjectWrapper) Epoch(v string) *ObjectWrapper { return w.Annotation(EpochKey, v) }

// OwnedBy appends an ownerReference to owner.
func (w *ObjectWrapper) OwnedBy(owner *unstructured.Unstructured) *ObjectWrapper {
	refs := append(w.u.GetOwnerReferences(), metav1.OwnerReference{
		APIVersion: owner.GetAPIVersion(), Kind: owner.GetKind(), Name: owner.GetName(), UID: owner.GetUID(),
	})
	w.u.SetOwnerReferences(refs)
	return w
}

// OwnerRefs replaces the ownerReferences (nil removes them).
func (w *ObjectWrapper) OwnerRefs(refs ...metav1.OwnerReference) *ObjectWrapper {
	w.u.SetOwnerReferences(refs)
	return w
}

// podLabelsPath is where the host writes claim-time pod labels.
func (w *ObjectWrapper) podLabelsPath() []string {
	if w.u.GetKind() == "Sandbox" {
		return []string{"spec", "podTemplate", "metadata", "labels"}
	}
	return []string{"spec", "additionalPodMetadata", "labels"}
}

// PodLabel sets one claim-time pod label.
func (w *ObjectWrapper) PodLabel(k, v string) *ObjectWrapper {
	p := w.podLabelsPath()
	labels, _, _ := unstructured.NestedStringMap(w.u.Object, p...)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[k] = v
	_ = unstructured.SetNestedStringMap(w.u.Object, labels, p...)
	return w
}

// NoPodLabel removes one claim-time pod label (and the labels map, once
// empty).
func (w *ObjectWrapper) NoPodLabel(k string) *ObjectWrapper {
	p := w.podLabelsPath()
	labels, _, _ := unstructured.NestedStringMap(w.u.Object, p...)
	delete(labels, k)
	if len(labels) == 0 {
		unstructured.RemoveNestedField(w.u.Object, p...)
		return w
	}
	_ = unstructured.SetNestedStringMap(w.u.Object, labels, p...)
	return w
}

// Set sets any nested field (for malformed shapes).
func (w *ObjectWrapper) Set(value any, path ...string) *ObjectWrapper {
	_ = unstructured.SetNestedField(w.u.Object, value, path...)
	return w
}

// Obj returns a copy of the built object, so one builder can make several.
func (w *ObjectWrapper) Obj() *unstructured.Unstructured { return w.u.DeepCopy() }

// ConfigWrapper builds a FenceConfig.
type ConfigWrapper struct{ c *fencev1alpha1.FenceConfig }

// MakeConfig returns the FenceConfig named name binding HostUser in
// Namespace, with every option off.
func MakeConfig(name string) *ConfigWrapper {
	c := &fencev1alpha1.FenceConfig{}
	c.SetGroupVersionKind(fencev1alpha1.GroupVersion.WithKind(fencev1alpha1.Kind))
	c.Name = name
	c.Spec.Hosts = []fencev1alpha1.Host{{Username: HostUser, Namespaces: []string{Namespace}}}
	// What the CRD's default fills in on every FenceConfig the API server
	// serves.
	c.Spec.PerSandboxLabelKey = fence.DefaultPerSandboxLabelKey
	return &ConfigWrapper{c: c}
}

// Host adds a bound host.
func (w *ConfigWrapper) Host(user string, namespaces ...string) *ConfigWrapper {
	w.c.Spec.Hosts = append(w.c.Spec.Hosts, fencev1alpha1.Host{Username: user, Namespaces: namespaces})
	return w
}

// SelectorHost adds a host bound by a namespaceSelector of matchLabels
// (label, value pairs), and by the namespaces listed, if any.
func (w *ConfigWrapper) SelectorHost(user string, matchLabels map[string]string, namespaces ...string) *ConfigWrapper {
	sel := &fencev1alpha1.NamespaceSelector{MatchLabels: map[string]fencev1alpha1.LabelValue{}}
	for k, v := range matchLabels {
		sel.MatchLabels[k] = fencev1alpha1.LabelValue(v)
	}
	w.c.Spec.Hosts = append(w.c.Spec.Hosts, fencev1alpha1.Host{Username: user, Namespaces: namespaces, NamespaceSelector: sel})
	return w
}

// MakeNamespace returns a Namespace named name with labels (key, value
// pairs), as the webhook's namespace informer caches it.
func MakeNamespace(name string, labels ...string) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}}
	m.Name = name
	if len(labels) > 0 {
		m.Labels = map[string]string{}
		for i := 0; i+1 < len(labels); i += 2 {
			m.Labels[labels[i]] = labels[i+1]
		}
	}
	return m
}

// NoHosts removes every bound host.
func (w *ConfigWrapper) NoHosts() *ConfigWrapper { w.c.Spec.Hosts = nil; return w }

// LabelKey sets spec.perSandboxLabelKey.
func (w *ConfigWrapper) LabelKey(k string) *ConfigWrapper { w.c.Spec.PerSandboxLabelKey = k; return w }

// UniqueOwnerLabel sets spec.uniqueOwnerLabel.
func (w *ConfigWrapper) UniqueOwnerLabel() *ConfigWrapper { w.c.Spec.UniqueOwnerLabel = true; return w }

// Obj returns the built config.
func (w *ConfigWrapper) Obj() *fencev1alpha1.FenceConfig { return w.c }
