//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	fencev1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// Every bound host gets every check: the webhook routes only
// ServiceAccounts outside kube-system, so the FenceConfig refuses to bind
// any other identity, with a message saying why. Before the fix the schema
// took any user name, and such a host was fenced by the policy but never
// seen by the webhook: its policy for an invented owner was admitted.
func TestFenceConfigBindsOnlyServiceAccountsOutsideKubeSystem(t *testing.T) {
	ctx := testContext(t)
	configs := env.Admin.Dynamic.Resource(framework.FenceConfigGVR)
	cfg, err := configs.Get(ctx, fencev1.DefaultConfigName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hosts, _, _ := unstructured.NestedSlice(cfg.Object, "spec", "hosts")
	for _, tc := range []struct{ name, username, want string }{
		{"an x509 user", "sandbox-host", "a bound host must be a ServiceAccount"},
		{"an OIDC user", "oidc:alice@example.com", "a bound host must be a ServiceAccount"},
		{"a kube-system ServiceAccount", "system:serviceaccount:kube-system:generic-garbage-collector", "a kube-system ServiceAccount can never be a bound host"},
		{"the webhook's own ServiceAccount", framework.ServiceAccountUser(framework.WebhookNamespace, framework.WebhookName), "the webhook's own ServiceAccount can never be a bound host"},
	} {
		t.Run(tc.name+" is refused as a host", func(t *testing.T) {
			withHost := append(append([]any(nil), hosts...), map[string]any{"username": tc.username, "namespaces": []any{env.HostNamespace}})
			body, err := json.Marshal(map[string]any{"spec": map[string]any{"hosts": withHost}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = configs.Patch(ctx, fencev1.DefaultConfigName, types.MergePatchType, body, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "spec.hosts") {
				t.Fatalf("binding %s: want 422 Invalid on spec.hosts saying %q, got %v", tc.username, tc.want, err)
			}
		})
	}
}

// A missing FenceConfig blocks no one but the identities that may be bound
// hosts: the controller renders the missing state into the
// egress policy, which then refuses every ServiceAccount outside
// kube-system in opted-in namespaces and lets the garbage collector, the
// namespace controller and operators through, so orphans are collected and
// a namespace holding fenced objects deletes.
func TestMissingFenceConfigBlocksOnlyBoundHosts(t *testing.T) {
	requireWebhook(t)
	ctx := testContext(t)
	ns := env.HostNamespace

	// Set up while the configuration is there.
	collected, collectedPolicy := ownedPolicy(t, fence.OwnerKindSandboxClaim)
	orphanedByOperator, operatorsOrphan := ownedPolicy(t, fence.OwnerKindSandboxClaim)
	_, kept := ownedPolicy(t, fence.OwnerKindSandboxClaim)
	doomed := fencedNamespaceWithObjects(t)
	claim := hostClaim(t)
	later, err := env.PerSandboxPolicy(fence.OwnerKindSandboxClaim, claim.GetName(), string(claim.GetUID()), []string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	malformed := name("malformed")
	if err := env.WithoutHolderEpochBinding(ctx, func() error {
		_, err := create(t, env.Admin, framework.SandboxGVR, framework.MakeSandbox(ns, malformed).Annotation(fence.AnnotationHolderEpoch, "01").Obj())
		return err
	}); err != nil {
		t.Fatal(err)
	}

	removeFenceConfig(t)

	t.Run("the host's policy create is refused by the egress policy", func(t *testing.T) {
		_, err := env.Host.Dynamic.Resource(framework.CNPGVR).Namespace(ns).Create(ctx, later, metav1.CreateOptions{})
		framework.ExpectDenied(t, "host create without configuration", err, framework.PolicyCiliumEgress, "cilium-fence:", missingConfig)
	})
	t.Run("the host's delete of its own policy is refused by the egress policy", func(t *testing.T) {
		err := env.Host.Dynamic.Resource(framework.CNPGVR).Namespace(ns).Delete(ctx, kept.GetName(), metav1.DeleteOptions{})
		framework.ExpectDenied(t, "host delete without configuration", err, framework.PolicyCiliumEgress, "cilium-fence:", missingConfig)
	})
	t.Run("the operator writes and deletes its policies in the fenced namespace", func(t *testing.T) {
		p := operatorPolicy(ns)
		_, err := create(t, env.Operator, framework.CNPGVR, p)
		framework.ExpectAdmitted(t, "operator create without configuration", err)
		framework.ExpectAdmitted(t, "operator delete without configuration",
			env.Operator.Dynamic.Resource(framework.CNPGVR).Namespace(ns).Delete(ctx, p.GetName(), metav1.DeleteOptions{}))
	})
	t.Run("the garbage collector deletes the policy of a deleted claim", func(t *testing.T) {
		framework.ExpectAdmitted(t, "host deletes its claim",
			env.Host.Dynamic.Resource(framework.ClaimGVR).Namespace(ns).Delete(ctx, collected.GetName(), metav1.DeleteOptions{}))
		expectCollected(t, collectedPolicy)
	})
	t.Run("the garbage collector's orphaning update goes through for an operator's orphaning delete", func(t *testing.T) {
		orphan := metav1.DeletePropagationOrphan
		framework.ExpectAdmitted(t, "operator orphans a claim",
			env.Operator.Dynamic.Resource(framework.ClaimGVR).Namespace(ns).Delete(ctx, orphanedByOperator.GetName(), metav1.DeleteOptions{PropagationPolicy: &orphan}))
		err := framework.Eventually(ctx, 2*time.Minute, 100*time.Millisecond, "the garbage collector strips the owner and finishes the delete", func(ctx context.Context) (bool, string, error) {
			_, err := env.Admin.Dynamic.Resource(framework.ClaimGVR).Namespace(ns).Get(ctx, orphanedByOperator.GetName(), metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				return false, "claim still there", nil
			}
			p, err := env.Admin.Dynamic.Resource(framework.CNPGVR).Namespace(ns).Get(ctx, operatorsOrphan.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			return len(p.GetOwnerReferences()) == 0, "policy still names its owner", nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a fenced namespace holding a claim, a Sandbox and their policies is deleted", func(t *testing.T) {
		expectNamespaceDeleted(t, doomed, 2*time.Minute)
	})
	// The repair rule's explicit choice: without the break-glass list it is
	// not enforced, for anyone.
	t.Run("the repair rule lapses: the host's change of a malformed epoch is admitted", func(t *testing.T) {
		framework.ExpectAdmitted(t, "host repairs a malformed epoch without configuration",
			patch(t, env.Host, framework.SandboxGVR, ns, malformed, types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+fence.AnnotationHolderEpoch+`":"5"}}}`)))
	})
}

// fencedNamespaceWithObjects creates an opted-in namespace holding what a
// host leaves in one: a claim and a pool-less Sandbox, each with its
// per-sandbox policy (created by the admin, whom the fence never checks).
// The objects have no cleanup of their own: deleting the namespace is what
// the callers test, and its cleanup removes them. (A DELETE of each object
// after the namespace is gone proves nothing, and its answer varies: a
// 404, v1.33's "failed to configure policy: namespaces ... not found", or a
// connection the API server just restarted by the caller did not keep.)
func fencedNamespaceWithObjects(t *testing.T) string {
	t.Helper()
	ctx := testContext(t)
	ns := name("doomed")
	kc := env.Admin.Kube
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{fencev1.FencedNamespaceLabel: fencev1.FencedNamespaceValue}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kc.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	key := fence.DefaultPerSandboxLabelKey
	c := mustCreateKept(t, env.Admin, framework.ClaimGVR, framework.MakeClaim(ns, "claim").PodLabel(key, "claim").Obj())
	s := mustCreateKept(t, env.Admin, framework.SandboxGVR, framework.MakeSandbox(ns, "sandbox").PodLabel(key, "sandbox").Annotation(fence.AnnotationHolderEpoch, "3").Obj())
	for _, o := range []*unstructured.Unstructured{c, s} {
		p, err := fence.BuildPerSandboxPolicy(fence.PolicyInput{
			Owner: fence.PolicyOwner{Kind: o.GetKind(), Name: o.GetName(), UID: string(o.GetUID())}, Namespace: ns, Hosts: []string{"example.com"},
		})
		if err != nil {
			t.Fatal(err)
		}
		mustCreateKept(t, env.Admin, framework.CNPGVR, p)
	}
	return ns
}

// expectNamespaceDeleted deletes ns as the admin and waits until the
// namespace controller has emptied and removed it, leaving nothing stored
// in it.
func expectNamespaceDeleted(t *testing.T, ns string, timeout time.Duration) {
	t.Helper()
	if err := env.Admin.Kube.CoreV1().Namespaces().Delete(testContext(t), ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNamespaceGone(t, ns, timeout)
	if left := storedIn(t, ns); len(left) > 0 {
		t.Errorf("namespace %s is gone but still holds %s: its deletion left them behind", ns, strings.Join(left, ", "))
	}
}

// storedIn lists the Sandboxes, claims and CiliumNetworkPolicies stored in
// ns, which may no longer exist (a list does not need the namespace).
func storedIn(t *testing.T, ns string) []string {
	t.Helper()
	var out []string
	for _, gvr := range []schema.GroupVersionResource{framework.SandboxGVR, framework.ClaimGVR, framework.CNPGVR} {
		l, err := env.Admin.Dynamic.Resource(gvr).Namespace(ns).List(testContext(t), metav1.ListOptions{})
		if err != nil {
			t.Fatalf("listing %s in namespace %s: %v", gvr.Resource, ns, err)
		}
		for _, o := range l.Items {
			out = append(out, gvr.Resource+"/"+o.GetName())
		}
	}
	return out
}

// waitNamespaceGone waits until the namespace controller has emptied and
// removed ns, whose deletion has started.
func waitNamespaceGone(t *testing.T, ns string, timeout time.Duration) {
	t.Helper()
	ctx := testContext(t)
	err := framework.Eventually(ctx, timeout, 250*time.Millisecond, "namespace "+ns+" deleted", func(ctx context.Context) (bool, string, error) {
		n, err := env.Admin.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, "", err
		}
		var why []string
		for _, c := range n.Status.Conditions {
			if c.Status == corev1.ConditionTrue {
				why = append(why, string(c.Type)+": "+c.Message)
			}
		}
		return false, string(n.Status.Phase) + " " + strings.Join(why, "; "), nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// removeFenceConfig deletes the FenceConfig for the rest of the test, waits
// until both enforcers have seen it go, and restores it when the test ends,
// waiting until both see it again.
// missingConfig is what the egress policy says while the FenceConfig is
// missing.
const missingConfig = `FenceConfig "sandbox-fence" not found, so bound hosts cannot be told from other ServiceAccounts`

func removeFenceConfig(t *testing.T) {
	t.Helper()
	ctx := testContext(t)
	configs := env.Admin.Dynamic.Resource(framework.FenceConfigGVR)
	saved, err := configs.Get(ctx, fencev1.DefaultConfigName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		restore := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": saved.GetAPIVersion(), "kind": saved.GetKind(),
			"metadata": map[string]any{"name": saved.GetName(), "labels": saved.GetLabels()},
			"spec":     saved.Object["spec"],
		}}
		ctx := context.Background()
		if _, err := configs.Create(ctx, restore, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Errorf("restore FenceConfig %s: %v", saved.GetName(), err)
			return
		}
		// The policy fences the host again, and the webhook checks owners again.
		ms, err := env.Markers(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		for _, m := range ms {
			if err := env.WaitDenied(ctx, m, renderWait()); err != nil {
				t.Errorf("after restoring the FenceConfig: %v", err)
			}
		}
		claim := hostClaim(t)
		valid, err := env.PerSandboxPolicy(fence.OwnerKindSandboxClaim, claim.GetName(), string(claim.GetUID()), []string{"example.com"})
		if err != nil {
			t.Error(err)
			return
		}
		if err := env.WaitAdmitted(ctx, framework.Marker{Name: "webhook reads the FenceConfig again", As: env.Host, Obj: valid}, renderWait()); err != nil {
			t.Errorf("after restoring the FenceConfig: %v", err)
		}
	})
	if err := configs.Delete(ctx, fencev1.DefaultConfigName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The controller has rendered it once the egress policy refuses the
	// host's unprefixed policy for the missing configuration, and the
	// operator's policy is admitted.
	cnp, err := env.PerSandboxPolicy(fence.OwnerKindSandboxClaim, "marker", "00000000-0000-4000-8000-000000000002", []string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	cnp.SetName("marker-without-prefix")
	if err := env.WaitDenied(ctx, framework.Marker{Name: "egress policy without configuration", As: env.Host, Obj: cnp, Want: missingConfig}, renderWait()); err != nil {
		t.Fatal(err)
	}
	if err := env.WaitAdmitted(ctx, framework.Marker{Name: "policy without configuration, operator", As: env.Operator, Obj: operatorPolicy(env.HostNamespace)}, renderWait()); err != nil {
		t.Fatal(err)
	}
}

// TestTheControllerRendersEveryChange: a FenceConfig change is in force once
// the controller in the webhook binary has rendered it into the policies
// and the webhook configuration. It measures how long that
// takes on a real API server (the figure docs/install.md states) and that
// the Rendered condition then names the new generation.
func TestTheControllerRendersEveryChange(t *testing.T) {
	requireShipped(t)
	requireWebhook(t)
	ctx := testContext(t)
	configs := env.Admin.Dynamic.Resource(framework.FenceConfigGVR)
	saved, err := configs.Get(ctx, fencev1.DefaultConfigName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hosts, _, _ := unstructured.NestedSlice(saved.Object, "spec", "hosts")
	if len(hosts) == 0 {
		t.Fatal("the suite's FenceConfig binds no host")
	}
	restore, err := json.Marshal(map[string]any{"spec": map[string]any{"hosts": hosts}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := configs.Patch(context.Background(), fencev1.DefaultConfigName, types.MergePatchType, restore, metav1.PatchOptions{}); err != nil {
			t.Errorf("restoring the FenceConfig: %v", err)
		}
	})
	// One namespace more for the first host: nothing else changes.
	probe := name("render-probe")
	changed := append([]any(nil), hosts...)
	first := changed[0].(map[string]any)
	first = map[string]any{"username": first["username"], "namespaces": append(append([]any(nil), first["namespaces"].([]any)...), probe)}
	changed[0] = first
	body, err := json.Marshal(map[string]any{"spec": map[string]any{"hosts": changed}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	updated, err := configs.Patch(ctx, fencev1.DefaultConfigName, types.MergePatchType, body, metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	generation := updated.GetGeneration()
	vaps := env.Admin.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	vwcs := env.Admin.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	var inPolicies, inWebhook, reported time.Duration
	err = framework.Eventually(ctx, 30*time.Second, 10*time.Millisecond, "the change rendered and reported", func(ctx context.Context) (bool, string, error) {
		if inPolicies == 0 {
			p, err := vaps.Get(ctx, framework.PolicyCiliumEgress, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			for _, v := range p.Spec.Variables {
				if v.Name == "config" && strings.Contains(v.Expression, fmt.Sprintf(`"generation": dyn(%d)`, generation)) && strings.Contains(v.Expression, probe) {
					inPolicies = time.Since(start)
				}
			}
		}
		if inWebhook == 0 {
			w, err := vwcs.Get(ctx, framework.WebhookConfigName, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			for _, c := range w.Webhooks[0].MatchConditions {
				if c.Name == "bound-hosts" && strings.Contains(c.Expression, probe) {
					inWebhook = time.Since(start)
				}
			}
		}
		if reported == 0 {
			cfg, err := configs.Get(ctx, fencev1.DefaultConfigName, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			conds, _, _ := unstructured.NestedSlice(cfg.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == fencev1.ConditionRendered && m["status"] == "True" && m["observedGeneration"] == generation {
					reported = time.Since(start)
				}
			}
		}
		return inPolicies > 0 && inWebhook > 0 && reported > 0,
			fmt.Sprintf("policies %v, webhook %v, condition %v", inPolicies, inWebhook, reported), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("FIGURE render | generation %d in the egress policy %s, in the webhook configuration %s, Rendered condition %s after the write",
		generation, inPolicies.Round(time.Millisecond), inWebhook.Round(time.Millisecond), reported.Round(time.Millisecond))
	if inPolicies > 5*time.Second || inWebhook > 5*time.Second {
		t.Errorf("rendering took %s (policies) and %s (webhook), want within 5 s", inPolicies, inWebhook)
	}
}
