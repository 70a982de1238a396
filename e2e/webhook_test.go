//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/rest"

	fencev1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/e2e/cluster"
	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

const webhookSuffix = ".fence.sandbox.namzu.ai"

// What CEL cannot see: the owner must exist in the
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
		// No case retries: a host writes the policy right after creating its
		// owner, so an admission may not depend on the webhook's cache having
		// caught up (a miss is read live).
		want string
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
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kind, owner, uid := tc.policy(t)
			cnp, err := env.PerSandboxPolicy(kind, owner, uid, []string{"example.com"})
			if err != nil {
				t.Fatal(err)
			}
			_, err = create(t, env.Host, framework.CNPGVR, cnp)
			if tc.want == "" {
				framework.ExpectAdmitted(t, tc.name, err)
				return
			}
			framework.ExpectDenied(t, tc.name, err, webhookSuffix, "cilium-fence:", tc.want)
		})
	}
}

// The webhook admits on its cache's copy of an owner (--owner-cache-first,
// the default), so an owner's deletion counts once the webhook's watch has
// delivered it; a policy written in between references an owner that is
// going, and the garbage collector deletes it with that owner
// (docs/contract.md §4.4). The test measures that window, from the
// DELETE's answer until every replica refuses (five refusals in a row), and
// fails above maxDeletionWindow.
func TestATerminatingOwnerIsRefusedOnceTheWebhookSeesItsDeletion(t *testing.T) {
	requireWebhook(t)
	const maxDeletionWindow = 2 * time.Second
	ctx := testContext(t)
	ns := env.HostNamespace
	c := hostClaim(t)
	claims := env.Admin.Dynamic.Resource(framework.ClaimGVR).Namespace(ns)
	// A finalizer keeps the claim terminating while the policy is written.
	if _, err := claims.Patch(ctx, c.GetName(), types.MergePatchType, []byte(`{"metadata":{"finalizers":["e2e.sandbox-fence/hold"]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = claims.Patch(context.Background(), c.GetName(), types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	cnp, err := env.PerSandboxPolicy(fence.OwnerKindSandboxClaim, c.GetName(), string(c.GetUID()), []string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	policies := env.Host.Dynamic.Resource(framework.CNPGVR).Namespace(ns)
	if err := claims.Delete(ctx, c.GetName(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	var inARow int
	var firstRefused time.Time
	err = framework.Eventually(ctx, 30*time.Second, 10*time.Millisecond, "five refusals in a row as being deleted", func(ctx context.Context) (bool, string, error) {
		_, err := policies.Create(ctx, cnp, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		v := framework.VerdictOf(err)
		if v.Admitted { // inside the window
			inARow = 0
			return false, v.String(), nil
		}
		// Any other refusal is a wrong answer, not a lag.
		if err := v.DeniedBy(webhookSuffix, "cilium-fence:", "being deleted"); err != nil {
			return false, "", err
		}
		if inARow == 0 {
			firstRefused = time.Now()
		}
		inARow++
		return inARow == 5, v.String(), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	window := firstRefused.Sub(deleted)
	t.Logf("the deletion counted %s after the DELETE answered", window.Round(time.Millisecond))
	if window > maxDeletionWindow {
		t.Errorf("the webhook admitted policies for a terminating claim for %s after its DELETE answered, more than %s (docs/contract.md §4.4)", window.Round(time.Millisecond), maxDeletionWindow)
	}
}

// With spec.uniqueOwnerLabel set, no other claim or Sandbox in the namespace
// may carry the owner's label value. A claim's one
// adopted Sandbox inherits its label and is the same sandbox; a second
// Sandbox owned by the same claim is not, however it got its owner
// reference. Before the fix every object owned by the claim was skipped,
// so the host's two Sandboxes shared one egress allowance.
func TestUniqueOwnerLabelCountsASecondSandboxOfTheSameClaim(t *testing.T) {
	requireWebhook(t)
	ctx := testContext(t)
	ns := env.HostNamespace
	key := fence.DefaultPerSandboxLabelKey
	setUniqueOwnerLabel(t)
	claim := hostClaim(t)
	ownedByClaim := func(n string) *unstructured.Unstructured {
		s := framework.MakeSandbox(ns, n).PodLabel(key, claim.GetName()).Obj()
		s.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: claim.GetAPIVersion(), Kind: claim.GetKind(), Name: claim.GetName(), UID: claim.GetUID()}})
		return mustCreate(t, env.Host, framework.SandboxGVR, s)
	}
	cnp, err := env.PerSandboxPolicy(fence.OwnerKindSandboxClaim, claim.GetName(), string(claim.GetUID()), []string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	policies := env.Host.Dynamic.Resource(framework.CNPGVR).Namespace(ns)
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}

	first, second := ownedByClaim(name("adopted")), ownedByClaim(name("second"))
	// The uniqueness check reads the webhook's cache: poll until it has both.
	err = framework.Eventually(ctx, renderWait(), 200*time.Millisecond, "two Sandboxes of the claim refused", func(ctx context.Context) (bool, string, error) {
		_, err := policies.Create(ctx, cnp, dryRun)
		v := framework.VerdictOf(err)
		return v.DeniedBy(webhookSuffix, "cilium-fence:", "Sandbox/"+first.GetName(), "Sandbox/"+second.GetName()) == nil, v.String(), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// With the second one gone, the claim's one Sandbox is the same sandbox.
	if err := env.Admin.Dynamic.Resource(framework.SandboxGVR).Namespace(ns).Delete(ctx, second.GetName(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = framework.Eventually(ctx, time.Minute, 200*time.Millisecond, "the claim's one Sandbox admitted", func(ctx context.Context) (bool, string, error) {
		_, err := policies.Create(ctx, cnp, dryRun)
		return err == nil, framework.VerdictOf(err).String(), nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// setUniqueOwnerLabel sets FenceConfig spec.uniqueOwnerLabel for the test
// and restores the default install when it ends.
func setUniqueOwnerLabel(t *testing.T) {
	t.Helper()
	configs := env.Admin.Dynamic.Resource(framework.FenceConfigGVR)
	if _, err := configs.Patch(testContext(t), fencev1.DefaultConfigName, types.MergePatchType, []byte(`{"spec":{"uniqueOwnerLabel":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := configs.Patch(context.Background(), fencev1.DefaultConfigName, types.MergePatchType, []byte(`{"spec":{"uniqueOwnerLabel":null}}`), metav1.PatchOptions{}); err != nil {
			t.Errorf("restore FenceConfig spec.uniqueOwnerLabel: %v", err)
		}
	})
}

// kubectl prints only the causes of a 422 that carries them (The <kind>
// "<name>" is invalid: <field>: <cause>) and drops the message: each cause
// must say which rule family refused the write, and that it was a denial.
// Checked through the kubectl this suite builds, as the
// host. Before the fix the output named neither.
func TestKubectlShowsTheRuleFamilyOfAWebhookDenial(t *testing.T) {
	requireWebhook(t)
	cnp, err := env.PerSandboxPolicy(fence.OwnerKindSandboxClaim, name("ghost"), string(uuid.NewUUID()), []string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	body, err := cnp.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	out, err := kubectlAs(t, env.Host, body, "create", "-f", "-")
	if err == nil {
		t.Fatalf("kubectl create of a policy for an invented owner succeeded:\n%s", out)
	}
	for _, want := range []string{
		`The CiliumNetworkPolicy "` + cnp.GetName() + `" is invalid`,
		"metadata.ownerReferences[0].name: cilium-fence: denied by the sandbox-fence webhook: Not found",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl output lacks %q:\n%s", want, out)
		}
	}
}

// kubectlAs runs the suite's kubectl as id with stdin, and returns its
// combined output.
func kubectlAs(t *testing.T, id *framework.Identity, stdin []byte, args ...string) (string, error) {
	t.Helper()
	root := repoRoot(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cluster.WriteKubeconfig(kubeconfig, map[string]*rest.Config{id.Name: id.Config}, id.Name); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(testContext(t), filepath.Join(root, "bin", "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
