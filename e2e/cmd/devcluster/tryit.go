package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
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
