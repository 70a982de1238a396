//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	fencev1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// specPolicy is the contract's per-sandbox policy verbatim, as the TypeScript host sends it.
const specPolicy = `{"apiVersion":"cilium.io/v2","kind":"CiliumNetworkPolicy",
 "metadata":{"name":"namzu-sbx-{{uid}}","namespace":"{{ns}}","ownerReferences":[{"apiVersion":"extensions.agents.x-k8s.io/v1beta1","kind":"SandboxClaim","name":"{{claim}}","uid":"{{uid}}"}]},
 "spec":{"endpointSelector":{"matchLabels":{"sandbox.namzu.ai/per-sandbox-egress":"{{claim}}"}},
  "egress":[
   {"toEndpoints":[{"matchLabels":{"k8s:io.kubernetes.pod.namespace":"kube-system","k8s:k8s-app":"kube-dns"}}],
    "toPorts":[{"ports":[{"port":"53","protocol":"ANY"}],"rules":{"dns":[{"matchPattern":"*"}]}}]},
   {"toFQDNs":[{"matchName":"registry.npmjs.org"},{"matchName":"example.com"},{"matchPattern":"*.example.com"}]}]}}`

// hostClaim creates a SandboxClaim as the host acquire does: with the
// per-sandbox label carrying its own name in the claim-time pod labels.
func hostClaim(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	n := name("claim")
	return mustCreate(t, env.Host, framework.ClaimGVR, framework.MakeClaim(env.HostNamespace, n).PodLabel(fence.DefaultPerSandboxLabelKey, n).Obj())
}

func decode(t *testing.T, body []byte) *unstructured.Unstructured {
	t.Helper()
	objs, err := framework.DecodeYAML(body)
	if err != nil || len(objs) != 1 {
		t.Fatalf("decode body: %v (%d objects)", err, len(objs))
	}
	return objs[0]
}

func TestPerSandboxPolicyRawSpecBodyIsAdmittedUnchanged(t *testing.T) {
	claim := hostClaim(t)
	body := rawBody(specPolicy, "uid", string(claim.GetUID()), "ns", env.HostNamespace, "claim", claim.GetName())
	sent := decode(t, body)

	_, err := create(t, env.Host, framework.CNPGVR, sent)
	framework.ExpectAdmitted(t, "POST of the contract's policy body", err)

	// The host reads the policy back and requires deep equality,
	// so neither admission nor the CRD may change what it wrote.
	got := get(t, framework.CNPGVR, env.HostNamespace, sent.GetName())
	if d := cmp.Diff(sent.Object["spec"], got.Object["spec"]); d != "" {
		t.Errorf("read-back spec differs from the body sent (-sent +got):\n%s", d)
	}
	if d := cmp.Diff(sent.GetOwnerReferences(), got.GetOwnerReferences()); d != "" {
		t.Errorf("read-back ownerReferences differ (-sent +got):\n%s", d)
	}

	framework.ExpectAdmitted(t, "merge PATCH of the same full body (the 409 path)",
		patch(t, env.Host, framework.CNPGVR, env.HostNamespace, sent.GetName(), types.MergePatchType, body))
	framework.ExpectAdmitted(t, "DELETE of the host's own policy",
		env.Host.Dynamic.Resource(framework.CNPGVR).Namespace(env.HostNamespace).Delete(testContext(t), sent.GetName(), metav1.DeleteOptions{}))
}

func TestPerSandboxPolicyShapesOutsideTheContractAreDenied(t *testing.T) {
	requirePolicy(t, framework.PolicyCiliumEgress)
	claim := hostClaim(t)
	tests := []struct {
		name   string
		mutate func(u *unstructured.Unstructured)
	}{
		{name: "a name without the namzu-sbx- prefix", mutate: func(u *unstructured.Unstructured) { u.SetName("egress-" + string(claim.GetUID())) }},
		{name: "an egress rule to the world entity", mutate: func(u *unstructured.Unstructured) {
			appendEgress(u, map[string]any{"toEntities": []any{"world"}})
		}},
		{name: "a CIDR egress rule", mutate: func(u *unstructured.Unstructured) {
			appendEgress(u, map[string]any{"toCIDR": []any{"0.0.0.0/0"}})
		}},
		{name: "a bare wildcard matchPattern", mutate: func(u *unstructured.Unstructured) {
			appendEgress(u, map[string]any{"toFQDNs": []any{map[string]any{"matchPattern": "*"}}})
		}},
		{name: "a second selector label", mutate: func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "namzu-workspace", "spec", "endpointSelector", "matchLabels", "sandbox.namzu.ai/template")
		}},
		{name: "an ingress rule", mutate: func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"fromEntities": []any{"world"}}}, "spec", "ingress")
		}},
		{name: "an owner reference blocking owner deletion", mutate: func(u *unstructured.Unstructured) {
			refs := u.GetOwnerReferences()
			refs[0].BlockOwnerDeletion = new(true)
			u.SetOwnerReferences(refs)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cnp, err := env.PerSandboxPolicy(fence.OwnerKindSandboxClaim, claim.GetName(), string(claim.GetUID()), []string{"example.com"})
			if err != nil {
				t.Fatal(err)
			}
			tc.mutate(cnp)
			_, err = create(t, env.Host, framework.CNPGVR, cnp)
			framework.ExpectDenied(t, tc.name, err, framework.PolicyCiliumEgress)
		})
	}
}

func appendEgress(u *unstructured.Unstructured, rule map[string]any) {
	egress, _, _ := unstructured.NestedSlice(u.Object, "spec", "egress")
	_ = unstructured.SetNestedSlice(u.Object, append(egress, rule), "spec", "egress")
}

// An invented owner uid has the right shape, so only the webhook, which
// looks the owner up, can refuse it.
func TestPerSandboxPolicyWithAnInventedOwnerIsDeniedByTheWebhook(t *testing.T) {
	requireWebhook(t)
	cnp, err := env.PerSandboxPolicy(fence.OwnerKindSandboxClaim, name("ghost"), string(uuid.NewUUID()), []string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = create(t, env.Host, framework.CNPGVR, cnp)
	framework.ExpectDenied(t, "policy owned by a claim that does not exist", err, ".fence.sandbox.namzu.ai", "cilium-fence:")
}

func TestOperatorIsNotFencedAndHostCannotTouchTheOperatorsPolicies(t *testing.T) {
	requirePolicy(t, framework.PolicyCiliumEgress)
	baseline := decode(t, []byte(`{"apiVersion":"cilium.io/v2","kind":"CiliumNetworkPolicy",
 "metadata":{"name":"baseline-egress","namespace":"`+env.HostNamespace+`"},
 "spec":{"endpointSelector":{},"egress":[{"toEntities":["world"]}]}}`))
	baseline.SetName(name("baseline"))
	_, err := create(t, env.Operator, framework.CNPGVR, baseline)
	framework.ExpectAdmitted(t, "operator creates a baseline policy", err)

	err = env.Host.Dynamic.Resource(framework.CNPGVR).Namespace(env.HostNamespace).Delete(testContext(t), baseline.GetName(), metav1.DeleteOptions{})
	framework.ExpectDenied(t, "host deletes the operator's baseline policy", err, framework.PolicyCiliumEgress)
}

// A host bound to its own namespace that is also granted RBAC in another
// fenced namespace (a copy-pasted RoleBinding) is still refused there: the
// fence, not RBAC, ties a host to its namespaces.
func TestHostOutsideItsNamespaceIsRefused(t *testing.T) {
	requirePolicy(t, framework.PolicyCiliumEgress)
	claim := hostClaim(t)
	cnp, err := env.PerSandboxPolicy(fence.OwnerKindSandboxClaim, claim.GetName(), string(claim.GetUID()), []string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	err = grantOtherHostTheHostsRole(t, cnp)
	framework.ExpectDenied(t, "other host writes a policy in the host's namespace", err, framework.PolicyCiliumEgress)
}

// grantOtherHostTheHostsRole binds the other host to the host's Role in the
// host's namespace, so that only the fence can refuse its writes there, and
// returns the answer to its dry-run create of probe once that answer comes
// from admission (RBAC's caches settle asynchronously).
func grantOtherHostTheHostsRole(t *testing.T, probe *unstructured.Unstructured) error {
	t.Helper()
	ctx := testContext(t)
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name("other-host-misgrant"), Namespace: env.HostNamespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: framework.HostRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: framework.OtherServiceAccount, Namespace: env.OtherHostNamespace}},
	}
	if _, err := env.Admin.Kube.RbacV1().RoleBindings(env.HostNamespace).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Admin.Kube.RbacV1().RoleBindings(env.HostNamespace).Delete(context.Background(), rb.Name, metav1.DeleteOptions{})
	})
	var last framework.Verdict
	err := framework.Eventually(ctx, time.Minute, 200*time.Millisecond, "other host's write reaches admission", func(ctx context.Context) (bool, string, error) {
		_, err := env.OtherHost.Dynamic.Resource(framework.CNPGVR).Namespace(env.HostNamespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		last = framework.VerdictOf(err)
		return last.Admitted || last.By != "", last.String(), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return last.Err
}

// No host reaches another host's sandboxes, in the two ways
// a security review got there on the real API server: a FenceConfig that
// lists one namespace for both hosts (or lists it for one and selects it
// for the other), where each could create or delete
// the other's per-sandbox policies; and a namespace listed for a host
// without the opt-in label, where the host was not fenced at all. Both were admitted before.
func TestNoHostReachesAnotherHostsSandboxes(t *testing.T) {
	requirePolicy(t, framework.PolicyCiliumEgress)
	ctx := testContext(t)
	claim := hostClaim(t)
	hostsPolicy, err := env.PerSandboxPolicy(fence.OwnerKindSandboxClaim, claim.GetName(), string(claim.GetUID()), []string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, env.Host, framework.CNPGVR, hostsPolicy)
	restore := func() {
		if err := env.ConfigureFence(context.Background(), fencev1.DefaultConfigName); err != nil {
			t.Errorf("restoring the FenceConfig: %v", err)
		}
		if err := env.WaitForEnforcement(context.Background(), logf); err != nil {
			t.Errorf("after restoring the FenceConfig: %v", err)
		}
	}

	t.Run("a namespace listed for two hosts is neither's", func(t *testing.T) {
		spec := env.FenceConfigSpec()
		spec.Hosts[1].Namespaces = append(spec.Hosts[1].Namespaces, env.HostNamespace)
		if err := env.ConfigureFenceSpec(ctx, fencev1.DefaultConfigName, spec); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(restore)
		const shared = "is listed for more than one host"
		probe := hostsPolicy.DeepCopy()
		if err := env.WaitDenied(ctx, framework.Marker{Name: "shared namespace rendered", As: env.Host, Obj: probe, Want: shared}, renderWait()); err != nil {
			t.Fatal(err)
		}
		err := grantOtherHostTheHostsRole(t, probe)
		framework.ExpectDenied(t, "the other host creates the host's sandbox's policy", err, framework.PolicyCiliumEgress, shared)
		err = env.OtherHost.Dynamic.Resource(framework.CNPGVR).Namespace(env.HostNamespace).Delete(ctx, hostsPolicy.GetName(), metav1.DeleteOptions{})
		framework.ExpectDenied(t, "the other host deletes the host's sandbox's policy", err, framework.PolicyCiliumEgress, shared)
	})

	// The API server's own namespaceObject labels, as a selector on
	// kubernetes.io/metadata.name (which it sets on every namespace) reads
	// them, and the webhook's routing of a host bound by selector.
	t.Run("a namespace one host lists and another's namespaceSelector selects is neither's", func(t *testing.T) {
		spec := env.FenceConfigSpec()
		spec.Hosts[1].NamespaceSelector = &fencev1.NamespaceSelector{MatchLabels: map[string]fencev1.LabelValue{
			"kubernetes.io/metadata.name": fencev1.LabelValue(env.HostNamespace)}}
		if err := env.ConfigureFenceSpec(ctx, fencev1.DefaultConfigName, spec); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(restore)
		const shared = "is bound to more than one host"
		probe := hostsPolicy.DeepCopy()
		if err := env.WaitDenied(ctx, framework.Marker{Name: "selected namespace rendered", As: env.Host, Obj: probe, Want: shared}, renderWait()); err != nil {
			t.Fatal(err)
		}
		err := grantOtherHostTheHostsRole(t, probe)
		framework.ExpectDenied(t, "the selecting host creates the host's sandbox's policy", err, framework.PolicyCiliumEgress, shared)
	})

	t.Run("a namespace listed for a host but not opted in refuses the host", func(t *testing.T) {
		ns := unfencedNamespace(t)
		spec := env.FenceConfigSpec()
		spec.Hosts[0].Namespaces = append(spec.Hosts[0].Namespaces, ns)
		if err := env.ConfigureFenceSpec(ctx, fencev1.DefaultConfigName, spec); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(restore)
		world := operatorPolicy(ns)
		if err := env.WaitDenied(ctx, framework.Marker{Name: "listed namespace rendered", As: env.Host, Obj: world,
			Want: "lacks the label fence.sandbox.namzu.ai/enabled=true"}, renderWait()); err != nil {
			t.Fatal(err)
		}
	})
}

// Teardown sends no DELETE: the garbage collector removes the policy with its
// owner, which only works if the fence admitted a real owner
// reference.
func TestGarbageCollectionDeletesThePolicyWithItsOwner(t *testing.T) {
	ctx := testContext(t)
	claim := hostClaim(t)
	cnp, err := env.PerSandboxPolicy(fence.OwnerKindSandboxClaim, claim.GetName(), string(claim.GetUID()), []string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = create(t, env.Host, framework.CNPGVR, cnp)
	framework.ExpectAdmitted(t, "host creates its policy", err)
	if err := env.Host.Dynamic.Resource(framework.ClaimGVR).Namespace(env.HostNamespace).Delete(ctx, claim.GetName(), metav1.DeleteOptions{}); err != nil {
		t.Fatalf("host deletes its claim: %v", err)
	}
	expectCollected(t, cnp)
}

// Each item of a delete-collection is admitted on its own, with no request
// name: the refusal of an item must still start with cilium-fence: and name
// it. Before the fix every item failed with "no such key: name", the
// host's own policies included. The host's Role
// has no deletecollection; a host granted it meets the same rules.
func TestHostDeleteCollectionIsJudgedItemByItem(t *testing.T) {
	requirePolicy(t, framework.PolicyCiliumEgress)
	ctx := testContext(t)
	ns := env.HostNamespace
	grantDeleteCollection(t, "policies", []rbacv1.PolicyRule{
		{APIGroups: []string{"cilium.io"}, Resources: []string{"ciliumnetworkpolicies"}, Verbs: []string{"deletecollection"}},
	})
	set := name("set")
	baseline := operatorPolicy(ns)
	baseline.SetLabels(map[string]string{"e2e-set": set})
	mustCreate(t, env.Operator, framework.CNPGVR, baseline)
	_, own := ownedPolicy(t, fence.OwnerKindSandboxClaim)
	if err := patch(t, env.Admin, framework.CNPGVR, ns, own.GetName(), types.MergePatchType, []byte(`{"metadata":{"labels":{"e2e-own":"`+set+`"}}}`)); err != nil {
		t.Fatal(err)
	}
	policies := env.Host.Dynamic.Resource(framework.CNPGVR).Namespace(ns)

	err := policies.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "e2e-set=" + set})
	framework.ExpectDenied(t, "delete-collection reaching the operator's policy", err, framework.PolicyCiliumEgress,
		`cilium-fence: metadata.name: "`+baseline.GetName()+`" does not start with namzu-sbx-`)
	if _, err := env.Admin.Dynamic.Resource(framework.CNPGVR).Namespace(ns).Get(ctx, baseline.GetName(), metav1.GetOptions{}); err != nil {
		t.Errorf("the operator's policy after the refused delete-collection: %v", err)
	}

	framework.ExpectAdmitted(t, "delete-collection of the host's own policy",
		policies.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "e2e-own=" + set}))
	if _, err := env.Admin.Dynamic.Resource(framework.CNPGVR).Namespace(ns).Get(ctx, own.GetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the host's own policy after its delete-collection: %v, want gone", err)
	}
}
