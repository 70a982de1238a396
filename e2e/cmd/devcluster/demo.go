package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/e2e/provider"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

type tryIt struct{ what, cmd string }

// prepareTryIt creates a Sandbox at epoch 1 and an example file, and returns
// three host commands: one admitted, two denied.
func prepareTryIt(ctx context.Context, d dev, env *framework.Env) ([]tryIt, error) {
	sbx := framework.MakeSandbox(env.HostNamespace, "demo").Annotation(fence.AnnotationHolderEpoch, "1").Obj()
	created, err := env.Admin.Dynamic.Resource(framework.SandboxGVR).Namespace(env.HostNamespace).Create(ctx, sbx, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	examples := filepath.Join(d.dir, "examples")
	if err := os.MkdirAll(examples, 0o755); err != nil {
		return nil, err
	}
	world := filepath.Join(examples, "world-egress.yaml")
	// Everything but the egress is the host's real per-sandbox policy for
	// sandbox demo (its own name, owner and selector), so the denial is the
	// one that matters: a peer outside the allowlist.
	body := fmt.Sprintf(`# sandbox demo's own per-sandbox policy, widened to the whole internet:
# the fence refuses the egress rule.
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata:
  name: %[1]s%[2]s
  namespace: %[3]s
  ownerReferences:
  - apiVersion: agents.x-k8s.io/v1beta1
    kind: Sandbox
    name: demo
    uid: %[2]s
spec:
  endpointSelector:
    matchLabels:
      %[4]s: demo
  egress:
  - toEntities: [world]
`, fence.PolicyNamePrefix, created.GetUID(), env.HostNamespace, fence.DefaultPerSandboxLabelKey)
	if err := os.WriteFile(world, []byte(body), 0o644); err != nil {
		return nil, err
	}
	kc := func(args string) string {
		rel, _ := filepath.Rel(d.root, d.kubeconfig())
		return fmt.Sprintf("bin/kubectl --kubeconfig %s --context host -n %s %s", rel, env.HostNamespace, args)
	}
	relWorld, _ := filepath.Rel(d.root, world)
	return []tryIt{
		{"ADMITTED: the holder raises the epoch of sandbox demo from 1 to 2", kc("annotate sandbox demo sandbox.namzu.ai/holder-epoch=2 --overwrite")},
		{"DENIED: a stale holder writes epoch 1 over 2 (sandbox-fence-holder-epoch)", kc("annotate sandbox demo sandbox.namzu.ai/holder-epoch=1 --overwrite")},
		{"DENIED: the host widens egress to the world (sandbox-fence-cilium-egress)", kc("create -f " + relWorld)},
	}, nil
}

// step is one demo action and the verdict it must get.
type step struct {
	what string
	// want is "admitted" or the name (or a substring of it) of the policy
	// or webhook that must deny.
	want string
	do   func(ctx context.Context) error
	// skip, when non-empty, is why the step cannot run here.
	skip string
}

func (d dev) demo() error {
	ctx := context.Background()
	state, err := os.MkdirTemp("", "sandbox-fence-demo-")
	if err != nil {
		return err
	}
	l := &provider.Local{RepoRoot: d.root, BinDir: d.bin, KubernetesVersion: d.version, StateDir: state, RemoveState: true, Logf: logf}
	env, err := l.Setup(ctx)
	if err != nil {
		_ = l.Teardown(ctx, true, "")
		return err
	}
	wrong := runDemo(ctx, env)
	if err := l.Teardown(ctx, wrong > 0, ""); err != nil {
		return err
	}
	if wrong > 0 {
		return fmt.Errorf("%d step(s) got the wrong verdict", wrong)
	}
	fmt.Println("\nevery verdict as expected")
	return nil
}

func runDemo(ctx context.Context, env *framework.Env) (wrong int) {
	ns := env.HostNamespace
	sandboxes := func(id *framework.Identity) interface {
		Patch(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (*unstructured.Unstructured, error)
	} {
		return id.Dynamic.Resource(framework.SandboxGVR).Namespace(ns)
	}
	epochPatch := func(epoch uint64) ([]byte, error) {
		cur, err := env.Host.Dynamic.Resource(framework.SandboxGVR).Namespace(ns).Get(ctx, "demo", metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		ops, err := fence.BuildHolderEpochPatch(fence.PatchInput{Read: fence.ReadHolderEpoch(cur), Epoch: &epoch, Mode: fence.ModeSuspended, ChangedAt: fence.FormatChangedAt(time.Now())})
		if err != nil {
			return nil, err
		}
		return fence.MarshalPatch(ops)
	}
	var claim *unstructured.Unstructured
	var policyName string
	baseline := "operator-baseline"
	webhookSkip := ""
	if !env.WebhookInstalled {
		webhookSkip = "the webhook is not installed (see the setup log)"
	}
	steps := []step{
		{what: "host creates Sandbox demo at holder epoch 1", want: "admitted", do: func(ctx context.Context) error {
			_, err := env.Host.Dynamic.Resource(framework.SandboxGVR).Namespace(ns).Create(ctx,
				framework.MakeSandbox(ns, "demo").Annotation(fence.AnnotationHolderEpoch, "1").Obj(), metav1.CreateOptions{})
			return err
		}},
		{what: "new holder suspends it with epoch 2 (fenced JSON patch from pkg/fence)", want: "admitted", do: func(ctx context.Context) error {
			body, err := epochPatch(2)
			if err != nil {
				return err
			}
			_, err = sandboxes(env.Host).Patch(ctx, "demo", types.JSONPatchType, body, metav1.PatchOptions{})
			return err
		}},
		{what: "stale holder writes epoch 1 over 2", want: framework.PolicyHolderEpoch, do: func(ctx context.Context) error {
			body, err := epochPatch(1)
			if err != nil {
				return err
			}
			_, err = sandboxes(env.Host).Patch(ctx, "demo", types.JSONPatchType, body, metav1.PatchOptions{})
			return err
		}},
		{what: "an unfenced merge patch still works (epoch untouched)", want: "admitted", do: func(ctx context.Context) error {
			_, err := sandboxes(env.Host).Patch(ctx, "demo", types.MergePatchType, []byte(`{"spec":{"operatingMode":"Running"}}`), metav1.PatchOptions{})
			return err
		}},
		{what: "host creates a Sandbox with the malformed epoch \"01\"", want: framework.PolicyHolderEpoch, do: func(ctx context.Context) error {
			_, err := env.Host.Dynamic.Resource(framework.SandboxGVR).Namespace(ns).Create(ctx,
				framework.MakeSandbox(ns, "malformed").Annotation(fence.AnnotationHolderEpoch, "01").Obj(), metav1.CreateOptions{})
			return err
		}},
		{what: "host claims a sandbox (SandboxClaim demo-claim)", want: "admitted", do: func(ctx context.Context) error {
			var err error
			claim, err = env.Host.Dynamic.Resource(framework.ClaimGVR).Namespace(ns).Create(ctx,
				framework.MakeClaim(ns, "demo-claim").PodLabel(fence.DefaultPerSandboxLabelKey, "demo-claim").Obj(), metav1.CreateOptions{})
			return err
		}},
		{what: "host writes the claim's per-sandbox egress policy (the contract's body)", want: "admitted", do: func(ctx context.Context) error {
			cnp, err := env.PerSandboxPolicy(fence.OwnerKindSandboxClaim, claim.GetName(), string(claim.GetUID()), []string{"registry.npmjs.org", ".example.com"})
			if err != nil {
				return err
			}
			policyName = cnp.GetName()
			_, err = env.Host.Dynamic.Resource(framework.CNPGVR).Namespace(ns).Create(ctx, cnp, metav1.CreateOptions{})
			return err
		}},
		{what: "host widens its policy to the whole internet", want: framework.PolicyCiliumEgress, do: func(ctx context.Context) error {
			body := []byte(`{"spec":{"egress":[{"toEntities":["world"]}]}}`)
			_, err := env.Host.Dynamic.Resource(framework.CNPGVR).Namespace(ns).Patch(ctx, policyName, types.MergePatchType, body, metav1.PatchOptions{})
			return err
		}},
		{what: "host writes a policy for an owner that does not exist", want: ".fence.sandbox.namzu.ai", skip: webhookSkip, do: func(ctx context.Context) error {
			cnp, err := env.PerSandboxPolicy(fence.OwnerKindSandboxClaim, "ghost", string(uuid.NewUUID()), []string{"example.com"})
			if err != nil {
				return err
			}
			_, err = env.Host.Dynamic.Resource(framework.CNPGVR).Namespace(ns).Create(ctx, cnp, metav1.CreateOptions{})
			return err
		}},
		{what: "operator creates a baseline policy (operators are not fenced)", want: "admitted", do: func(ctx context.Context) error {
			objs, err := framework.DecodeYAML([]byte(`{"apiVersion":"cilium.io/v2","kind":"CiliumNetworkPolicy","metadata":{"name":"` + baseline + `"},"spec":{"endpointSelector":{},"egress":[{"toEntities":["world"]}]}}`))
			if err != nil {
				return err
			}
			_, err = env.Operator.Dynamic.Resource(framework.CNPGVR).Namespace(ns).Create(ctx, objs[0], metav1.CreateOptions{})
			return err
		}},
		{what: "host deletes the operator's baseline policy", want: framework.PolicyCiliumEgress, do: func(ctx context.Context) error {
			return env.Host.Dynamic.Resource(framework.CNPGVR).Namespace(ns).Delete(ctx, baseline, metav1.DeleteOptions{})
		}},
		{what: "host releases the claim; the garbage collector deletes its policy", want: "admitted", do: func(ctx context.Context) error {
			if err := env.Host.Dynamic.Resource(framework.ClaimGVR).Namespace(ns).Delete(ctx, claim.GetName(), metav1.DeleteOptions{}); err != nil {
				return err
			}
			return framework.Eventually(ctx, 2*time.Minute, 250*time.Millisecond, "policy garbage-collected", func(ctx context.Context) (bool, string, error) {
				_, err := env.Admin.Dynamic.Resource(framework.CNPGVR).Namespace(ns).Get(ctx, policyName, metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return true, "", nil
				}
				return false, "still present", err
			})
		}},
	}
	fmt.Println()
	for i, s := range steps {
		fmt.Printf("%2d. %s\n", i+1, s.what)
		if s.skip != "" {
			fmt.Printf("    SKIPPED: %s (not counted as passing)\n", s.skip)
			continue
		}
		v := framework.VerdictOf(s.do(ctx))
		var bad error
		if s.want == "admitted" {
			if !v.Admitted {
				bad = fmt.Errorf("want admitted")
			}
		} else {
			bad = v.DeniedBy(s.want)
		}
		verdict := v.String()
		if len(verdict) > 220 {
			verdict = verdict[:220] + "..."
		}
		if bad != nil {
			wrong++
			fmt.Printf("    WRONG: %s; got %s\n", strings.TrimPrefix(bad.Error(), "want "), verdict)
			continue
		}
		fmt.Printf("    ok: %s\n", verdict)
	}
	return wrong
}
