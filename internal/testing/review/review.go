// Package review builds the admission traffic of the webhook benchmarks: a
// realistic AdmissionReview of a host's per-sandbox CiliumNetworkPolicy
// CREATE (the body pkg/fence writes, managedFields and
// ServiceAccount user info as the apiserver sends them, 2-4 KB on the wire),
// and the webhook's production handler over an in-memory cache that answers
// like the informer cache does (a deep copy per Get), for the handler
// benchmark of internal/webhook.
package review

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	authnv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/internal/webhook"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// Identity and namespace of the traffic: a bound host in its namespace.
const (
	Namespace = "sandboxes"
	HostUser  = "system:serviceaccount:sandboxes:sandbox-host"
)

// Owners is how many claims the cache holds; review i names owner i%Owners.
const Owners = 64

func ownerName(i int) string { return fmt.Sprintf("claim-%04d", i%Owners) }
func ownerUID(i int) string {
	return fmt.Sprintf("6f1e2d3c-4b5a-4978-8695-%012d", i%Owners)
}

// Kind says what a review asks.
type Kind int

const (
	// Admitted is the host's normal write: its own claim exists.
	Admitted Kind = iota
	// Denied names an owner that does not exist (an invented uid).
	Denied
)

// Build returns the JSON AdmissionReview number i of kind k.
func Build(i int, k Kind) ([]byte, error) {
	name, uid := ownerName(i), ownerUID(i)
	if k == Denied {
		name, uid = fmt.Sprintf("invented-%04d", i), fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
	}
	cnp, err := fence.BuildPerSandboxPolicy(fence.PolicyInput{
		Owner:     fence.PolicyOwner{Kind: "SandboxClaim", Name: name, UID: uid},
		Namespace: Namespace,
		Hosts:     []string{"registry.npmjs.org", "api.example.com", ".example.org", "github.com", ".githubusercontent.com", "pypi.org", "files.pythonhosted.org"},
	})
	if err != nil {
		return nil, err
	}
	// What the apiserver adds before admission on a CREATE.
	cnp.SetUID(types.UID(fmt.Sprintf("0b1c2d3e-4f50-4617-8283-%012d", i)))
	cnp.SetCreationTimestamp(metav1.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC))
	cnp.SetGeneration(1)
	cnp.SetManagedFields([]metav1.ManagedFieldsEntry{{
		Manager: "namzu-sandbox-host", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "cilium.io/v2",
		Time: new(metav1.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)), FieldsType: "FieldsV1",
		FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:ownerReferences":{".":{},"k:{\"uid\":\"` + uid + `\"}":{}}},"f:spec":{".":{},"f:egress":{},"f:endpointSelector":{}}}`)},
	}})
	obj, err := json.Marshal(cnp.Object)
	if err != nil {
		return nil, err
	}
	gvk := metav1.GroupVersionKind(fence.CiliumNetworkPolicyGVK)
	gvr := metav1.GroupVersionResource(fence.CiliumNetworkPolicyGVR)
	ar := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:  types.UID(fmt.Sprintf("5e6f7a8b-9c0d-4e1f-a2b3-%012d", i)),
			Kind: gvk, Resource: gvr, RequestKind: &gvk, RequestResource: &gvr,
			Name: cnp.GetName(), Namespace: Namespace, Operation: admissionv1.Create,
			UserInfo: authnv1.UserInfo{
				Username: HostUser, UID: "a1b2c3d4-e5f6-4789-8abc-def012345678",
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:sandboxes", "system:authenticated"},
				Extra: map[string]authnv1.ExtraValue{
					"authentication.kubernetes.io/credential-id": {"JTI=3f8e1c2a-7b6d-4e5f-9a0b-1c2d3e4f5a6b"},
					"authentication.kubernetes.io/node-name":     {"worker-7"},
					"authentication.kubernetes.io/node-uid":      {"9d8c7b6a-5f4e-4d3c-2b1a-0f9e8d7c6b5a"},
					"authentication.kubernetes.io/pod-name":      {"namzu-host-6c9f7d8b5-x2x7q"},
					"authentication.kubernetes.io/pod-uid":       {"1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"},
				},
			},
			Object:  runtime.RawExtension{Raw: obj},
			Options: runtime.RawExtension{Raw: []byte(`{"kind":"CreateOptions","apiVersion":"meta.k8s.io/v1","fieldManager":"namzu-sandbox-host","fieldValidation":"Strict"}`)},
			DryRun:  new(false),
		},
	}
	return json.Marshal(ar)
}

// memReader answers Gets from memory with a deep copy per call, as the
// controller-runtime informer cache does for unstructured objects.
type memReader struct {
	mu      sync.RWMutex
	config  *fencev1alpha1.FenceConfig
	objects map[types.NamespacedName]*unstructured.Unstructured
}

func (m *memReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	switch o := obj.(type) {
	case *fencev1alpha1.FenceConfig:
		if m.config == nil || key.Name != m.config.Name {
			return apierrors.NewNotFound(fencev1alpha1.GroupVersionResource.GroupResource(), key.Name)
		}
		if (&client.GetOptions{}).ApplyOptions(opts).UnsafeDisableDeepCopy != nil {
			*o = *m.config // the cache's own copy, as the informer cache hands it out
			return nil
		}
		m.config.DeepCopyInto(o)
		return nil
	case *unstructured.Unstructured:
		u, ok := m.objects[key]
		if !ok || u.GroupVersionKind() != o.GroupVersionKind() {
			return apierrors.NewNotFound(schema.GroupResource{Group: o.GroupVersionKind().Group, Resource: fence.SandboxClaimGVR.Resource}, key.Name)
		}
		u.DeepCopyInto(o)
		return nil
	}
	return fmt.Errorf("memReader: unsupported type %T", obj)
}

func (m *memReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return fmt.Errorf("memReader: List is not used by the owner check")
}

// Handler returns the webhook's CiliumEgressPath handler as cmd/webhook
// registers it, over a cache holding the FenceConfig binding HostUser and
// Owners claims. reg receives the webhook's metrics (nil: a private one).
// otherNamespaces binds that many more namespaces, of the longest names, to
// other hosts, 64 to a host: the FenceConfig's size, which the schema
// bounds at 512 namespaces.
func Handler(reg prometheus.Registerer, otherNamespaces int) http.Handler {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	cfg := &fencev1alpha1.FenceConfig{}
	cfg.SetGroupVersionKind(fencev1alpha1.GroupVersion.WithKind(fencev1alpha1.Kind))
	cfg.Name = fencev1alpha1.DefaultConfigName
	cfg.Spec.Hosts = []fencev1alpha1.Host{{Username: HostUser, Namespaces: []string{Namespace}}}
	// The CRD's default, which a FenceConfig read from the API server carries.
	cfg.Spec.PerSandboxLabelKey = fence.DefaultPerSandboxLabelKey
	for i := 0; otherNamespaces > 0; i++ {
		h := fencev1alpha1.Host{Username: fmt.Sprintf("system:serviceaccount:tenant-%d:host", i)}
		for ; otherNamespaces > 0 && len(h.Namespaces) < 64; otherNamespaces-- {
			h.Namespaces = append(h.Namespaces, fmt.Sprintf("tenant-%d-%054d", i, otherNamespaces))
		}
		cfg.Spec.Hosts = append(cfg.Spec.Hosts, h)
	}
	mem := &memReader{config: cfg, objects: map[types.NamespacedName]*unstructured.Unstructured{}}
	for i := range Owners {
		u := &unstructured.Unstructured{Object: map[string]any{}}
		u.SetGroupVersionKind(fence.SandboxClaimGVK)
		u.SetNamespace(Namespace)
		u.SetName(ownerName(i))
		u.SetUID(types.UID(ownerUID(i)))
		_ = unstructured.SetNestedField(u.Object, "namzu-pool", "spec", "warmPoolRef", "name")
		_ = unstructured.SetNestedField(u.Object, ownerName(i), "spec", "additionalPodMetadata", "labels", fence.DefaultPerSandboxLabelKey)
		mem.objects[types.NamespacedName{Namespace: Namespace, Name: ownerName(i)}] = u
	}
	m := webhook.NewMetrics(reg)
	return &admission.Webhook{Handler: &webhook.CiliumHandler{
		Config:  webhook.ConfigSource{Reader: mem, Name: cfg.Name},
		Owners:  &webhook.CachedOwners{Cache: mem, Live: mem, Metrics: m},
		Metrics: m,
	}}
}
