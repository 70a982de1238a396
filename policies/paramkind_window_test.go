package policies_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/sandbox-fence/sandbox-fence/internal/vapeval"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// TestUnresolvableParamKindBlocksOnlyFencedPolicyWrites reproduces what the
// soak measured on a real kube-apiserver: for up to 30 s after it starts (its
// REST mapper refreshes on a timer), a policy whose paramKind it cannot map
// refuses every request its matchConstraints match, before matchConditions
// and before the binding's namespaceSelector. The shipped policies must keep
// that refusal to the requests the fence is for: CiliumNetworkPolicy writes
// and deletes in opted-in namespaces, where it fails closed for everyone
// (the controllers retry; docs/install.md). Operators, other namespaces,
// ordinary Sandbox writes and every claim and Sandbox delete must go
// through, and the rules without params (holder-epoch, the orphan rule)
// must hold. The repair rule lapses (failurePolicy Ignore, its explicit
// choice). Strict delete, once an admin binds it, fails closed for Sandbox
// and claim deletes in opted-in namespaces.
func TestUnresolvableParamKindBlocksOnlyFencedPolicyWrites(t *testing.T) {
	var resources []vapeval.Resource
	for _, r := range vapeval.Resources {
		if r.GVK.Kind != "FenceConfig" { // the API server cannot map it yet
			resources = append(resources, r)
		}
	}
	start := func(t *testing.T, optIn bool) *vapeval.Harness {
		var bundle []*vapeval.PolicyDir
		for _, p := range loadBundle(t) {
			if !p.OptIn || optIn {
				bundle = append(bundle, p)
			}
		}
		h, err := vapeval.Start(context.Background(), vapeval.Env{
			Policies: bundle, Params: []*unstructured.Unstructured{defaultParams(t)}, ParamCRDs: paramCRDs(t),
			Namespaces: namespaces(t), Resources: resources,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Stop)
		return h
	}
	installed, withStrictDelete := start(t, false), start(t, true)

	host := &user.DefaultInfo{Name: hostUser}
	operator := &user.DefaultInfo{Name: "alice", Groups: []string{"system:authenticated"}}
	gc := &user.DefaultInfo{Name: "system:serviceaccount:kube-system:generic-garbage-collector"}
	nsController := &user.DefaultInfo{Name: "system:serviceaccount:kube-system:namespace-controller"}
	cnpGVR := schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumnetworkpolicies"}
	sandboxGVR := schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}
	claimGVK := schema.GroupVersionKind{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Kind: "SandboxClaim"}
	claimGVR := schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxclaims"}

	policyIn := func(ns string) *unstructured.Unstructured {
		p, err := fence.BuildPerSandboxPolicy(fence.PolicyInput{
			Namespace: ns,
			Owner:     fence.PolicyOwner{Kind: fence.OwnerKindSandboxClaim, Name: "claim-1", UID: "0b7c6f0e-1111-4a2b-9c3d-000000000001"},
			Hosts:     []string{"example.com"},
		})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	cnpCreate := func(as user.Info, ns string) vapeval.Request {
		p := policyIn(ns)
		return vapeval.Request{Operation: admission.Create, Kind: cnpGVK, Resource: cnpGVR, Namespace: ns, Name: p.GetName(), Object: p, User: as}
	}
	cnpDelete := func(as user.Info, ns string) vapeval.Request {
		p := policyIn(ns)
		return vapeval.Request{Operation: admission.Delete, Kind: cnpGVK, Resource: cnpGVR, Namespace: ns, Name: p.GetName(), OldObject: p, User: as,
			Options: &metav1.DeleteOptions{}}
	}
	sandboxUpdate := func(as user.Info, oldAnns, newAnns map[string]string, oldMode, newMode string) vapeval.Request {
		return vapeval.Request{Operation: admission.Update, Kind: sandboxGVK, Resource: sandboxGVR, Namespace: "sbx", Name: "ws-1",
			OldObject: storedSandbox(oldAnns, oldMode), Object: storedSandbox(newAnns, newMode), User: as}
	}
	sandboxDelete := func(as user.Info, anns map[string]string, opts *metav1.DeleteOptions) vapeval.Request {
		return vapeval.Request{Operation: admission.Delete, Kind: sandboxGVK, Resource: sandboxGVR, Namespace: "sbx", Name: "ws-1",
			OldObject: storedSandbox(anns, "Running"), User: as, Options: opts}
	}
	claimDelete := func(as user.Info, opts *metav1.DeleteOptions) vapeval.Request {
		c := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
			"metadata": map[string]any{"name": "claim-1", "namespace": "sbx"}, "spec": map[string]any{"warmPoolRef": map[string]any{"name": "pool"}}}}
		return vapeval.Request{Operation: admission.Delete, Kind: claimGVK, Resource: claimGVR, Namespace: "sbx", Name: "claim-1", OldObject: c, User: as, Options: opts}
	}
	epochAnns := func(e string) map[string]string { return map[string]string{fence.AnnotationHolderEpoch: e} }
	orphan := metav1.DeletePropagationOrphan

	tests := []struct {
		name string
		h    *vapeval.Harness
		req  vapeval.Request
		// wantDenied is a substring of the denial; "" means admitted.
		wantDenied string
	}{
		{"an operator's mode change of a Sandbox is admitted", installed, sandboxUpdate(operator, epochAnns("2"), epochAnns("2"), "Running", "Suspended"), ""},
		{"the host's fenced write raising the epoch is admitted", installed, sandboxUpdate(host, epochAnns("2"), epochAnns("3"), "Running", "Suspended"), ""},
		{"a stale holder is still refused by the holder-epoch rule", installed, sandboxUpdate(host, epochAnns("3"), epochAnns("2"), "Running", "Suspended"), "epoch may not decrease"},
		{"the repair rule lapses: the host's change of a malformed epoch is admitted (its explicit choice)", installed, sandboxUpdate(host, epochAnns("01"), epochAnns("7"), "Running", "Running"), ""},
		{"a policy write in a namespace that did not opt in is admitted", installed, cnpCreate(operator, "plain"), ""},
		{"a policy write in a namespace that opted out is admitted", installed, cnpCreate(host, "opted-out"), ""},
		{"the host's policy write in an opted-in namespace fails closed", installed, cnpCreate(host, "sbx"), "failed to configure policy"},
		{"an operator's policy write in an opted-in namespace fails closed too", installed, cnpCreate(operator, "sbx"), "failed to configure policy"},
		{"the garbage collector's policy delete in an opted-in namespace fails closed too, and is retried", installed, cnpDelete(gc, "sbx"), "failed to configure policy"},
		{"the namespace controller's Sandbox delete is admitted", installed, sandboxDelete(nsController, epochAnns("5"), &metav1.DeleteOptions{}), ""},
		{"the namespace controller's claim delete is admitted", installed, claimDelete(nsController, &metav1.DeleteOptions{}), ""},
		{"the host's unconditional delete of a fenced Sandbox is admitted while strict delete is not bound", installed, sandboxDelete(host, epochAnns("5"), &metav1.DeleteOptions{}), ""},
		{"the host's orphaning delete is still refused: the orphan rule reads no configuration", installed, claimDelete(host, &metav1.DeleteOptions{PropagationPolicy: &orphan}), "would orphan the dependents"},
		{"with strict delete bound, the namespace controller's Sandbox delete fails closed, and is retried", withStrictDelete, sandboxDelete(nsController, epochAnns("5"), &metav1.DeleteOptions{}), "failed to configure policy"},
		{"with strict delete bound, the host's claim delete fails closed", withStrictDelete, claimDelete(host, &metav1.DeleteOptions{}), "failed to configure policy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.h.Validate(context.Background(), tt.req)
			if tt.wantDenied == "" {
				if err != nil {
					t.Fatalf("denied, want admitted: %v", err)
				}
				return
			}
			var status *apierrors.StatusError
			if !errors.As(err, &status) {
				t.Fatalf("got %v, want a denial containing %q", err, tt.wantDenied)
			}
			if !strings.Contains(status.ErrStatus.Message, tt.wantDenied) {
				t.Fatalf("denial %q does not contain %q", status.ErrStatus.Message, tt.wantDenied)
			}
			// contract §8.1: a host reads 403 as missing RBAC, so every refusal,
			// a configuration error's too, must be 422.
			if status.ErrStatus.Code != 422 {
				t.Fatalf("denial has HTTP code %d, want 422: %q", status.ErrStatus.Code, status.ErrStatus.Message)
			}
		})
	}
}
