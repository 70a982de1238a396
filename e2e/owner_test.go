//go:build e2e

package e2e

import (
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// A per-sandbox egress policy never outlives its owner:
// every DELETE a host can send for a claim or a pool-less Sandbox leaves
// the owner's policy owned (the delete is refused) or gone (the garbage
// collector, which the local control plane runs, deleted it with its
// owner). Before the fix the orphaning deletes were admitted, and the
// garbage collector stripped the ownerReference from the policy.
func TestEveryHostDeleteLeavesThePerSandboxPolicyOwnedOrGone(t *testing.T) {
	ctx := testContext(t)
	// The host's Role has delete, not deletecollection; a host
	// granted more must meet the same rule on every item.
	grantDeleteCollection(t, "sandboxes-and-claims", []rbacv1.PolicyRule{
		{APIGroups: []string{"agents.x-k8s.io"}, Resources: []string{"sandboxes"}, Verbs: []string{"deletecollection"}},
		{APIGroups: []string{"extensions.agents.x-k8s.io"}, Resources: []string{"sandboxclaims"}, Verbs: []string{"deletecollection"}},
	})
	background, foreground, orphan := metav1.DeletePropagationBackground, metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan
	deletes := []struct {
		name       string
		opts       metav1.DeleteOptions
		collection bool
		refused    bool
	}{
		{name: "a DELETE without options", opts: metav1.DeleteOptions{}},
		{name: "propagationPolicy Background", opts: metav1.DeleteOptions{PropagationPolicy: &background}},
		{name: "propagationPolicy Foreground", opts: metav1.DeleteOptions{PropagationPolicy: &foreground}},
		{name: "propagationPolicy Orphan", opts: metav1.DeleteOptions{PropagationPolicy: &orphan}, refused: true},
		//nolint:staticcheck // SA1019: the deprecated field is what an old client sends; the rule covers it
		{name: "orphanDependents true", opts: metav1.DeleteOptions{OrphanDependents: new(true)}, refused: true},
		//nolint:staticcheck // SA1019: as above
		{name: "orphanDependents false", opts: metav1.DeleteOptions{OrphanDependents: new(false)}},
		{name: "a delete-collection with propagationPolicy Orphan", opts: metav1.DeleteOptions{PropagationPolicy: &orphan}, collection: true, refused: true},
		//nolint:staticcheck // SA1019: as above
		{name: "a delete-collection with orphanDependents true", opts: metav1.DeleteOptions{OrphanDependents: new(true)}, collection: true, refused: true},
		{name: "a delete-collection without options", collection: true},
	}
	for _, kind := range []string{fence.OwnerKindSandboxClaim, fence.OwnerKindSandbox} {
		for _, d := range deletes {
			t.Run(kind+": "+d.name, func(t *testing.T) {
				owner, policy := ownedPolicy(t, kind)
				owners := env.Host.Dynamic.Resource(ownerGVR(kind)).Namespace(owner.GetNamespace())
				var err error
				if d.collection {
					err = owners.DeleteCollection(ctx, d.opts, metav1.ListOptions{LabelSelector: "e2e-owner=" + owner.GetName()})
				} else {
					err = owners.Delete(ctx, owner.GetName(), d.opts)
				}
				if d.refused {
					framework.ExpectDenied(t, d.name, err, framework.PolicyCiliumOwner, "cilium-fence:", owner.GetName())
					expectOwned(t, policy, owner)
					return
				}
				framework.ExpectAdmitted(t, d.name, err)
				expectCollected(t, policy)
			})
		}
	}
}

// Two ways to detach an owner from its policy after the webhook admitted
// it. The orphan finalizer: any later DELETE without options (the host's
// own, or a controller's at shutdownTime) would orphan the policy; a host
// cannot add it, by any patch or on create (contract §4.5). The per-sandbox
// pod label: changed, the policy would select other pods; a host cannot
// change or remove it once set (contract §4.9).
func TestHostCannotDetachAnOwnerFromItsPolicy(t *testing.T) {
	ns := env.HostNamespace
	for _, kind := range []string{fence.OwnerKindSandboxClaim, fence.OwnerKindSandbox} {
		t.Run(kind+": a merge patch adding the finalizer is refused", func(t *testing.T) {
			owner, policy := ownedPolicy(t, kind)
			err := patch(t, env.Host, ownerGVR(kind), ns, owner.GetName(), types.MergePatchType, []byte(`{"metadata":{"finalizers":["orphan"]}}`))
			framework.ExpectDenied(t, "merge patch adding orphan", err, framework.PolicyCiliumOwner, "cilium-fence:", "metadata.finalizers", "orphan")
			framework.ExpectAdmitted(t, "then a DELETE without options",
				env.Host.Dynamic.Resource(ownerGVR(kind)).Namespace(ns).Delete(testContext(t), owner.GetName(), metav1.DeleteOptions{}))
			expectCollected(t, policy)
		})
		t.Run(kind+": a JSON patch changing the per-sandbox pod label is refused", func(t *testing.T) {
			owner, policy := ownedPolicy(t, kind)
			path := "/spec/additionalPodMetadata/labels/"
			if kind == fence.OwnerKindSandbox {
				path = "/spec/podTemplate/metadata/labels/"
			}
			path += strings.ReplaceAll(fence.DefaultPerSandboxLabelKey, "/", "~1")
			err := patch(t, env.Host, ownerGVR(kind), ns, owner.GetName(), types.JSONPatchType, []byte(`[{"op":"replace","path":"`+path+`","value":"another"}]`))
			framework.ExpectDenied(t, "JSON patch relabelling", err, framework.PolicyCiliumOwner, "cilium-fence:", "per-sandbox pod label", "once it is set")
			expectOwned(t, policy, owner)
		})
		t.Run(kind+": a create carrying the finalizer is refused", func(t *testing.T) {
			n := name("orphaned")
			var obj *unstructured.Unstructured
			if kind == fence.OwnerKindSandboxClaim {
				obj = framework.MakeClaim(ns, n).PodLabel(fence.DefaultPerSandboxLabelKey, n).Finalizer("orphan").Obj()
			} else {
				obj = framework.MakeSandbox(ns, n).PodLabel(fence.DefaultPerSandboxLabelKey, n).Finalizer("orphan").Obj()
			}
			_, err := create(t, env.Host, ownerGVR(kind), obj)
			framework.ExpectDenied(t, "create with orphan", err, framework.PolicyCiliumOwner, "cilium-fence:", "metadata.finalizers")
		})
	}
}
