package policies_test

import (
	"context"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/sandbox-fence/sandbox-fence/internal/vapeval"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// TestLeftoversOfAVanishedNamespaceStayDeletable: the fence never stands in
// the cluster's way, so when a namespace is gone while objects of it are
// still stored (a namespace finalized by hand, RELIABILITY.md finding 6),
// nothing the fence ships stops an admin, the garbage collector or a
// controller from deleting them.
// An API server reads the request's namespace for every policy that
// matches and refuses the request with NotFound when it is gone, whatever
// the failurePolicy; only a lookup made for a namespaceSelector is an error
// failurePolicy governs. So each shipped policy has a namespaceSelector
// and failurePolicy Ignore, and each is evaluated here as shipped (the
// whole bundle, strict delete bound, the default configuration rendered).
// The same requests with failurePolicy Fail are refused: that is what this
// test tells apart.
func TestLeftoversOfAVanishedNamespaceStayDeletable(t *testing.T) {
	const gone = "gone" // in no testdata/namespaces.yaml
	config := caseConfig(t, defaultParams(t), vapeval.CaseParams{})
	start := func(t *testing.T, bundle []*vapeval.PolicyDir) *vapeval.Harness {
		h, err := vapeval.Start(context.Background(), vapeval.Env{Policies: vapeval.Rendered(bundle, config),
			Namespaces: namespaces(t), Resources: vapeval.Resources})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Stop)
		return h
	}
	shipped := start(t, loadBundle(t))
	failing := start(t, vapeval.FailClosed(loadBundle(t)))

	admin := &user.DefaultInfo{Name: "alice", Groups: []string{"system:masters", "system:authenticated"}}
	gc := &user.DefaultInfo{Name: "system:serviceaccount:kube-system:generic-garbage-collector"}
	controller := &user.DefaultInfo{Name: "system:serviceaccount:agent-sandbox-system:agent-sandbox-controller"}
	host := &user.DefaultInfo{Name: hostUser}
	cnpGVR := schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumnetworkpolicies"}
	sandboxGVR := schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}
	claimGVK := schema.GroupVersionKind{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Kind: "SandboxClaim"}
	claimGVR := schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxclaims"}

	policy, err := fence.BuildPerSandboxPolicy(fence.PolicyInput{
		Namespace: gone,
		Owner:     fence.PolicyOwner{Kind: fence.OwnerKindSandboxClaim, Name: "claim-1", UID: "0b7c6f0e-1111-4a2b-9c3d-000000000001"},
		Hosts:     []string{"example.com"},
	})
	if err != nil {
		t.Fatal(err)
	}
	withFinalizer := func(u *unstructured.Unstructured, f string) *unstructured.Unstructured {
		u = u.DeepCopy()
		u.SetFinalizers([]string{f})
		return u
	}
	sandbox := func() *unstructured.Unstructured {
		s := storedSandbox(map[string]string{fence.AnnotationHolderEpoch: "5"}, "Running")
		s.SetNamespace(gone)
		return s
	}
	claim := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
		"metadata": map[string]any{"name": "claim-1", "namespace": gone}, "spec": map[string]any{"warmPoolRef": map[string]any{"name": "pool"}}}}
	del := func(as user.Info, gvk schema.GroupVersionKind, gvr schema.GroupVersionResource, old *unstructured.Unstructured) vapeval.Request {
		return vapeval.Request{Operation: admission.Delete, Kind: gvk, Resource: gvr, Namespace: gone, Name: old.GetName(), OldObject: old,
			User: as, Options: &metav1.DeleteOptions{}}
	}
	update := func(as user.Info, gvk schema.GroupVersionKind, gvr schema.GroupVersionResource, old, obj *unstructured.Unstructured) vapeval.Request {
		return vapeval.Request{Operation: admission.Update, Kind: gvk, Resource: gvr, Namespace: gone, Name: old.GetName(), OldObject: old,
			Object: obj, User: as, Options: &metav1.UpdateOptions{}}
	}
	for _, tt := range []struct {
		name   string
		req    vapeval.Request
		policy string // the policy that matches it
	}{
		{"an admin deletes a CiliumNetworkPolicy", del(admin, cnpGVK, cnpGVR, policy), "sandbox-fence-cilium-egress"},
		{"the garbage collector deletes a per-sandbox policy", del(gc, cnpGVK, cnpGVR, policy), "sandbox-fence-cilium-egress"},
		{"the host deletes its per-sandbox policy", del(host, cnpGVK, cnpGVR, policy), "sandbox-fence-cilium-egress"},
		{"the garbage collector removes a policy's foreground finalizer", update(gc, cnpGVK, cnpGVR,
			withFinalizer(policy, "foregroundDeletion"), policy), "sandbox-fence-cilium-egress"},
		{"the host deletes a fenced Sandbox (strict delete bound)", del(host, sandboxGVK, sandboxGVR, sandbox()), "sandbox-fence-strict-delete"},
		{"the controller removes its finalizer from a Sandbox", update(controller, sandboxGVK, sandboxGVR,
			withFinalizer(sandbox(), "agents.x-k8s.io/finalizer"), sandbox()), "sandbox-fence-holder-epoch"},
		{"the host deletes a claim (orphan rule and strict delete)", del(host, claimGVK, claimGVR, claim), "sandbox-fence-cilium-owner"},
		{"an admin deletes a claim", del(admin, claimGVK, claimGVR, claim), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := shipped.Validate(context.Background(), tt.req); err != nil {
				t.Fatalf("refused as shipped, want admitted: %v", err)
			}
			if tt.policy == "" {
				return
			}
			if err := failing.Validate(context.Background(), tt.req); err == nil {
				t.Fatalf("admitted with failurePolicy %s too: the request does not reach %s's namespace lookup, so this case shows nothing",
					admissionregistrationv1.Fail, tt.policy)
			}
		})
	}
}
