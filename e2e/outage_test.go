//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// ciliumWebhook is the shipped webhook entry for per-sandbox policies.
const ciliumWebhook = "cilium-egress.fence.sandbox.namzu.ai"

// With the webhook down, failurePolicy Fail refuses exactly what the shipped
// configuration routes to it — a ServiceAccount's policy CREATE/UPDATE in an
// opted-in namespace — with the API server's own message naming the webhook,
// never a silent admit of an unverified owner. Everything else keeps working:
// the host's Sandbox writes, its policy DELETE, other resources, other
// namespaces and human users. Restarting the webhook alone brings admission
// back.
func TestWebhookOutageRefusesOnlyWhatIsRoutedToIt(t *testing.T) {
	requireShipped(t)
	requireWebhook(t)
	requirePolicy(t, framework.PolicyCiliumEgress)
	if env.WebhookProcess == nil {
		t.Skipf("the %s provider gives the suite no handle on the webhook process (Env.WebhookProcess is nil): outage case not run (it runs with E2E_PROVIDER=local and kind)", env.Provider)
	}
	ctx := testContext(t)
	hostNS := env.HostNamespace
	open := unfencedNamespace(t)

	// Everything the outage writes against is set up while the webhook runs.
	claim := hostClaim(t)
	before, err := env.PerSandboxPolicy(fence.OwnerKindSandboxClaim, claim.GetName(), string(claim.GetUID()), []string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, env.Host, framework.CNPGVR, before)
	doomed := hostClaim(t)
	doomedPolicy, err := env.PerSandboxPolicy(fence.OwnerKindSandboxClaim, doomed.GetName(), string(doomed.GetUID()), []string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, env.Host, framework.CNPGVR, doomedPolicy)
	during := hostClaim(t)
	duringPolicy, err := env.PerSandboxPolicy(fence.OwnerKindSandboxClaim, during.GetName(), string(during.GetUID()), []string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	sbx := sandboxWithEpoch(t, "1")

	if err := env.WebhookProcess.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			restartWebhook(t)
		}
	})

	// The API server notices a dead backend on the next call (connection
	// refused); poll a dry run until it says so rather than assume it.
	var refused framework.Verdict
	err = framework.Eventually(ctx, time.Minute, 100*time.Millisecond, "policy writes refused while the webhook is down", func(ctx context.Context) (bool, string, error) {
		_, err := env.Host.Dynamic.Resource(framework.CNPGVR).Namespace(hostNS).Create(ctx, duringPolicy, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		refused = framework.VerdictOf(err)
		return !refused.Admitted, refused.String(), nil
	})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("the host's policy create in its fenced namespace is refused and names the webhook", func(t *testing.T) {
		_, err := env.Host.Dynamic.Resource(framework.CNPGVR).Namespace(hostNS).Create(ctx, duringPolicy, metav1.CreateOptions{})
		expectWebhookUnavailable(t, err, ciliumWebhook)
		if _, gerr := env.Admin.Dynamic.Resource(framework.CNPGVR).Namespace(hostNS).Get(ctx, duringPolicy.GetName(), metav1.GetOptions{}); !apierrors.IsNotFound(gerr) {
			t.Errorf("the refused policy was stored (get: %v)", gerr)
		}
	})
	t.Run("the host's merge patch of its own policy is refused and names the webhook", func(t *testing.T) {
		body := []byte(`{"spec":{"egress":[{"toFQDNs":[{"matchName":"example.org"}]}]}}`)
		expectWebhookUnavailable(t, patch(t, env.Host, framework.CNPGVR, hostNS, before.GetName(), types.MergePatchType, body), ciliumWebhook)
	})
	t.Run("the host's delete of its own policy is admitted: removing an allowance is never blocked", func(t *testing.T) {
		err := env.Host.Dynamic.Resource(framework.CNPGVR).Namespace(hostNS).Delete(ctx, doomedPolicy.GetName(), metav1.DeleteOptions{})
		framework.ExpectAdmitted(t, "host deletes its own policy during the outage", err)
	})
	t.Run("the host's fenced Sandbox writes are admitted", func(t *testing.T) {
		c := hostClient(t)
		if _, err := c.Suspend(ctx, hostNS, sbx.GetName(), fence.WriteOptions{Epoch: new(uint64(2))}); err != nil {
			t.Fatalf("fenced suspend at epoch 2: %v", err)
		}
		if _, err := c.Resume(ctx, hostNS, sbx.GetName(), fence.WriteOptions{}); err != nil {
			t.Fatalf("unfenced resume: %v", err)
		}
		if got := epochOf(t, hostNS, sbx.GetName()); got != "2" {
			t.Errorf("stored epoch %q, want 2", got)
		}
	})
	t.Run("the host's claim create is admitted", func(t *testing.T) {
		hostClaim(t)
	})
	t.Run("the host's policy create in a namespace that did not opt in is admitted", func(t *testing.T) {
		cnp, err := fence.BuildPerSandboxPolicy(fence.PolicyInput{
			Owner:     fence.PolicyOwner{Kind: fence.OwnerKindSandboxClaim, Name: "elsewhere", UID: "00000000-0000-4000-8000-000000000001"},
			Namespace: open,
			Hosts:     []string{"example.com"},
		})
		if err != nil {
			t.Fatal(err)
		}
		_, err = create(t, env.Host, framework.CNPGVR, cnp)
		framework.ExpectAdmitted(t, "host policy in "+open, err)
	})
	t.Run("the operator's policy in the fenced namespace is admitted", func(t *testing.T) {
		mustCreate(t, env.Operator, framework.CNPGVR, operatorPolicy(hostNS))
	})
	t.Run("the operator's policy in a namespace that did not opt in is admitted", func(t *testing.T) {
		mustCreate(t, env.Operator, framework.CNPGVR, operatorPolicy(open))
	})
	t.Run("the operator's ConfigMap in the fenced namespace is admitted", func(t *testing.T) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name("outage"), Namespace: hostNS}, Data: map[string]string{"k": "v"}}
		_, err := env.Operator.Kube.CoreV1().ConfigMaps(hostNS).Create(ctx, cm, metav1.CreateOptions{})
		framework.ExpectAdmitted(t, "operator ConfigMap", err)
		t.Cleanup(func() {
			_ = env.Admin.Kube.CoreV1().ConfigMaps(hostNS).Delete(context.Background(), cm.Name, metav1.DeleteOptions{})
		})
	})
	t.Run("the operator's Sandbox update is admitted", func(t *testing.T) {
		err := patch(t, env.Operator, framework.SandboxGVR, hostNS, sbx.GetName(), types.MergePatchType, []byte(`{"metadata":{"labels":{"outage":"survived"}}}`))
		framework.ExpectAdmitted(t, "operator merge patch of a Sandbox", err)
	})

	restartWebhook(t)
	restarted = true

	t.Run("after the restart the host's policy create is admitted", func(t *testing.T) {
		mustCreate(t, env.Host, framework.CNPGVR, duringPolicy)
	})
	t.Run("after the restart the host's merge patch is admitted", func(t *testing.T) {
		body := []byte(`{"spec":{"egress":[{"toFQDNs":[{"matchName":"example.org"}]}]}}`)
		framework.ExpectAdmitted(t, "merge patch after restart", patch(t, env.Host, framework.CNPGVR, hostNS, before.GetName(), types.MergePatchType, body))
	})
}

// restartWebhook starts the webhook again and polls until the API server
// both admits through it and is refused by it: a write admitted only because
// nothing answered would prove nothing.
func restartWebhook(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if err := env.WebhookProcess.Start(ctx); err != nil {
		t.Fatalf("restart the webhook: %v", err)
	}
	claim := hostClaim(t)
	cnp, err := env.PerSandboxPolicy(fence.OwnerKindSandboxClaim, claim.GetName(), string(claim.GetUID()), []string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.WaitAdmitted(ctx, framework.Marker{Name: "webhook back (valid owner)", As: env.Host, Obj: cnp}, renderWait()); err != nil {
		t.Fatal(err)
	}
	ms, err := env.Markers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Name == "webhook" {
			if err := env.WaitDenied(ctx, m, renderWait()); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatal("no webhook marker: the webhook is not registered")
}

// expectWebhookUnavailable checks the refusal of failurePolicy Fail: the
// write is not admitted and the message names the webhook that could not be
// called, so an operator reading it knows where to look.
func expectWebhookUnavailable(t *testing.T, err error, webhook string) {
	t.Helper()
	v := framework.VerdictOf(err)
	if v.Admitted {
		t.Fatalf("admitted while the webhook is down: want a refusal naming %s", webhook)
	}
	if want := `failed calling webhook "` + webhook + `"`; !strings.Contains(v.Message, want) {
		t.Fatalf("refusal does not say %s: %s", want, v)
	}
}

// operatorPolicy is an operator's baseline policy: not namzu-sbx-, no owner.
func operatorPolicy(ns string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cilium.io/v2",
		"kind":       "CiliumNetworkPolicy",
		"metadata":   map[string]any{"name": name("baseline"), "namespace": ns},
		"spec": map[string]any{
			"endpointSelector": map[string]any{},
			"egress":           []any{map[string]any{"toEntities": []any{"world"}}},
		},
	}}
}

// unfencedNamespace creates a namespace without the opt-in label, where both
// hosts and the operator hold the same RBAC as in the fenced one, so any
// refusal there could only come from admission.
func unfencedNamespace(t *testing.T) string {
	t.Helper()
	ctx := testContext(t)
	kc := env.Admin.Kube
	ns := name("open")
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kc.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: framework.HostRole, Namespace: ns}, Rules: framework.HostRules()}
	if _, err := kc.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, rb := range []*rbacv1.RoleBinding{
		{
			ObjectMeta: metav1.ObjectMeta{Name: "host", Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: framework.HostRole},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: framework.HostServiceAccount, Namespace: env.HostNamespace}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "operator", Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "admin"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: env.Operator.Username}},
		},
	} {
		if _, err := kc.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []*framework.Identity{env.Host, env.Operator} {
		attrs := authzv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: "cilium.io", Resource: "ciliumnetworkpolicies"}
		if err := env.WaitAllowed(ctx, id, attrs); err != nil {
			t.Fatal(err)
		}
	}
	return ns
}
