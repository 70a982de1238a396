//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

const webhookSuffix = ".fence.sandbox.namzu.ai"

// What CEL cannot see (contract §4.4 items 1-2): the owner must exist in the
// namespace with that uid and kind, not be terminating, and put the selector
// label on its own pods. Every policy below has a shape the egress VAP
// admits, so a refusal can only come from the webhook.
func TestWebhookChecksThePolicyOwner(t *testing.T) {
	requireWebhook(t)
	ns := env.HostNamespace
	key := fence.DefaultPerSandboxLabelKey
	labelled := func(t *testing.T) *unstructured.Unstructured { return hostClaim(t) }

	tests := []struct {
		name string
		// policy returns owner kind, name and uid for the policy.
		policy func(t *testing.T) (kind, name, uid string)
		// want is "" for admitted, else a substring of the webhook's denial.
		want string
		// eventually allows the webhook's owner cache to catch up with a
		// change the test itself just made (a deletion), by retrying the
		// write. Admitted cases never retry: a host writes the policy right
		// after creating its owner, so a lagging cache must not refuse it.
		eventually bool
	}{
		{
			name: "a claim that carries the label on its pods is admitted",
			policy: func(t *testing.T) (string, string, string) {
				c := labelled(t)
				return fence.OwnerKindSandboxClaim, c.GetName(), string(c.GetUID())
			},
		},
		{
			name: "a Sandbox owner (pool-less path) with the label in its pod template is admitted",
			policy: func(t *testing.T) (string, string, string) {
				n := name("poolless")
				s := mustCreate(t, env.Host, framework.SandboxGVR, framework.MakeSandbox(ns, n).PodLabel(key, n).Obj())
				return fence.OwnerKindSandbox, s.GetName(), string(s.GetUID())
			},
		},
		{
			name: "a claim without the label on its pods is refused",
			policy: func(t *testing.T) (string, string, string) {
				c := mustCreate(t, env.Host, framework.ClaimGVR, framework.MakeClaim(ns, name("unlabelled")).Obj())
				return fence.OwnerKindSandboxClaim, c.GetName(), string(c.GetUID())
			},
			want: "does not carry the pod label",
		},
		{
			name: "a claim whose label names another sandbox is refused",
			policy: func(t *testing.T) (string, string, string) {
				c := mustCreate(t, env.Host, framework.ClaimGVR, framework.MakeClaim(ns, name("borrowed")).PodLabel(key, "someone-else").Obj())
				return fence.OwnerKindSandboxClaim, c.GetName(), string(c.GetUID())
			},
			want: "does not carry the pod label",
		},
		{
			name: "one claim's name with another claim's uid is refused",
			policy: func(t *testing.T) (string, string, string) {
				a, b := labelled(t), labelled(t)
				return fence.OwnerKindSandboxClaim, a.GetName(), string(b.GetUID())
			},
			want: "uid",
		},
		{
			name: "a Sandbox referenced as a SandboxClaim is refused",
			policy: func(t *testing.T) (string, string, string) {
				n := name("kindswap")
				s := mustCreate(t, env.Host, framework.SandboxGVR, framework.MakeSandbox(ns, n).PodLabel(key, n).Obj())
				return fence.OwnerKindSandboxClaim, s.GetName(), string(s.GetUID())
			},
			want: "cilium-fence:",
		},
		{
			name: "a terminating claim is refused",
			policy: func(t *testing.T) (string, string, string) {
				c := labelled(t)
				claims := env.Admin.Dynamic.Resource(framework.ClaimGVR).Namespace(ns)
				ctx := testContext(t)
				// A finalizer keeps the claim terminating while the policy is written.
				if _, err := claims.Patch(ctx, c.GetName(), types.MergePatchType, []byte(`{"metadata":{"finalizers":["e2e.sandbox-fence/hold"]}}`), metav1.PatchOptions{}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					_, _ = claims.Patch(context.Background(), c.GetName(), types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
				})
				if err := claims.Delete(ctx, c.GetName(), metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				return fence.OwnerKindSandboxClaim, c.GetName(), string(c.GetUID())
			},
			want:       "being deleted",
			eventually: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kind, owner, uid := tc.policy(t)
			cnp, err := env.PerSandboxPolicy(kind, owner, uid, []string{"example.com"})
			if err != nil {
				t.Fatal(err)
			}
			_, err = create(t, env.Host, framework.CNPGVR, cnp)
			if tc.eventually {
				policies := env.Host.Dynamic.Resource(framework.CNPGVR).Namespace(ns)
				werr := framework.Eventually(testContext(t), 30*time.Second, 200*time.Millisecond, "webhook sees the change", func(ctx context.Context) (bool, string, error) {
					if framework.VerdictOf(err).DeniedBy(webhookSuffix, tc.want) == nil {
						return true, "", nil
					}
					if err == nil {
						_ = env.Admin.Dynamic.Resource(framework.CNPGVR).Namespace(ns).Delete(ctx, cnp.GetName(), metav1.DeleteOptions{})
					}
					_, err = policies.Create(ctx, cnp, metav1.CreateOptions{})
					return false, framework.VerdictOf(err).String(), nil
				})
				if werr != nil {
					t.Fatal(werr)
				}
			}
			if tc.want == "" {
				framework.ExpectAdmitted(t, tc.name, err)
				return
			}
			framework.ExpectDenied(t, tc.name, err, webhookSuffix, "cilium-fence:", tc.want)
		})
	}
}
