package framework

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// SandboxBuilder builds a Sandbox the way the host writes one (SPEC 1): a
// podTemplate with the template label and one container.
type SandboxBuilder struct{ u *unstructured.Unstructured }

// MakeSandbox starts a v1beta1 Sandbox in ns.
func MakeSandbox(ns, name string) *SandboxBuilder {
	return &SandboxBuilder{u: &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agents.x-k8s.io/v1beta1",
		"kind":       "Sandbox",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"operatingMode": "Running",
			"podTemplate": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"sandbox.namzu.ai/template": "namzu-workspace"}},
				"spec": map[string]any{
					"containers": []any{map[string]any{"name": "main", "image": "namzu/agent:1"}},
				},
			},
		},
	}}}
}

// Version sets the apiVersion (v1alpha1 to exercise the deprecated version).
func (b *SandboxBuilder) Version(v string) *SandboxBuilder {
	b.u.SetAPIVersion("agents.x-k8s.io/" + v)
	return b
}

// Annotation sets one annotation.
func (b *SandboxBuilder) Annotation(k, v string) *SandboxBuilder {
	a := b.u.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[k] = v
	b.u.SetAnnotations(a)
	return b
}

// PodLabel sets a claim-time pod label (the per-sandbox egress selector).
func (b *SandboxBuilder) PodLabel(k, v string) *SandboxBuilder {
	_ = unstructured.SetNestedField(b.u.Object, v, "spec", "podTemplate", "metadata", "labels", k)
	return b
}

// Mode sets spec.operatingMode.
func (b *SandboxBuilder) Mode(m string) *SandboxBuilder {
	_ = unstructured.SetNestedField(b.u.Object, m, "spec", "operatingMode")
	return b
}

// Obj returns the object.
func (b *SandboxBuilder) Obj() *unstructured.Unstructured { return b.u.DeepCopy() }

// ClaimBuilder builds a SandboxClaim as the host's acquire does.
type ClaimBuilder struct{ u *unstructured.Unstructured }

// MakeClaim starts a v1beta1 SandboxClaim in ns.
func MakeClaim(ns, name string) *ClaimBuilder {
	return &ClaimBuilder{u: &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "extensions.agents.x-k8s.io/v1beta1",
		"kind":       "SandboxClaim",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"warmPoolRef": map[string]any{"name": "namzu-pool"},
		},
	}}}
}

// PodLabel sets spec.additionalPodMetadata.labels[k] = v.
func (b *ClaimBuilder) PodLabel(k, v string) *ClaimBuilder {
	_ = unstructured.SetNestedField(b.u.Object, v, "spec", "additionalPodMetadata", "labels", k)
	return b
}

// Obj returns the object.
func (b *ClaimBuilder) Obj() *unstructured.Unstructured { return b.u.DeepCopy() }
