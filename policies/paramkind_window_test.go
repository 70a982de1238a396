package policies_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
// in opted-in namespaces. Operators, other namespaces and ordinary Sandbox
// writes must go through, and the holder-epoch rule (no paramKind) must hold.
func TestUnresolvableParamKindBlocksOnlyFencedPolicyWrites(t *testing.T) {
	var resources []vapeval.Resource
	for _, r := range vapeval.Resources {
		if r.GVK.Kind != "FenceConfig" { // the API server cannot map it yet
			resources = append(resources, r)
		}
	}
	h, err := vapeval.Start(context.Background(), vapeval.Env{
		Policies: loadBundle(t), Params: []*unstructured.Unstructured{defaultParams(t)},
		Namespaces: namespaces(t), Resources: resources,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)

	host := &user.DefaultInfo{Name: hostUser}
	operator := &user.DefaultInfo{Name: "alice", Groups: []string{"system:authenticated"}}
	cnpGVR := schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumnetworkpolicies"}
	sandboxGVR := schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}

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
	sandboxUpdate := func(as user.Info, oldAnns, newAnns map[string]string, oldMode, newMode string) vapeval.Request {
		return vapeval.Request{Operation: admission.Update, Kind: sandboxGVK, Resource: sandboxGVR, Namespace: "sbx", Name: "ws-1",
			OldObject: storedSandbox(oldAnns, oldMode), Object: storedSandbox(newAnns, newMode), User: as}
	}
	epochAnns := func(e string) map[string]string { return map[string]string{fence.AnnotationHolderEpoch: e} }

	tests := []struct {
		name string
		req  vapeval.Request
		// wantDenied is a substring of the denial; "" means admitted.
		wantDenied string
	}{
		{"an operator's mode change of a Sandbox is admitted", sandboxUpdate(operator, epochAnns("2"), epochAnns("2"), "Running", "Suspended"), ""},
		{"the host's fenced write raising the epoch is admitted", sandboxUpdate(host, epochAnns("2"), epochAnns("3"), "Running", "Suspended"), ""},
		{"a stale holder is still refused by the holder-epoch rule", sandboxUpdate(host, epochAnns("3"), epochAnns("2"), "Running", "Suspended"), "epoch may not decrease"},
		{"a policy write in a namespace that did not opt in is admitted", cnpCreate(operator, "plain"), ""},
		{"a policy write in a namespace that opted out is admitted", cnpCreate(host, "opted-out"), ""},
		{"the host's policy write in an opted-in namespace fails closed", cnpCreate(host, "sbx"), "failed to configure policy"},
		{"an operator's policy write in an opted-in namespace fails closed too", cnpCreate(operator, "sbx"), "failed to configure policy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := h.Validate(context.Background(), tt.req)
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
