//go:build e2e

package e2e

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	fencev1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// Strict delete switched on as an admin does it — the binding
// of config/vap/components/strict-delete and FenceConfig spec.strictDelete —
// then off again: once a holder fenced a workspace, a bound host may delete
// it only with the fenced DELETE, so a stale holder's
// unconditional DELETE cannot destroy it under the new holder's feet; and
// since deleting a claim deletes its Sandbox, a claim DELETE must carry
// preconditions too. It is a ValidatingAdmissionPolicy: no Sandbox or claim
// request reaches the webhook.
func TestStrictDeleteRequiresPreconditionsOnceFenced(t *testing.T) {
	requireShipped(t)
	ctx := testContext(t)
	enableStrictDelete(t)
	unconditional := func(id *framework.Identity, ns, n string) error {
		return id.Dynamic.Resource(framework.SandboxGVR).Namespace(ns).Delete(ctx, n, metav1.DeleteOptions{})
	}
	expectGone := func(t *testing.T, ns, n string) {
		t.Helper()
		_, err := env.Admin.Dynamic.Resource(framework.SandboxGVR).Namespace(ns).Get(ctx, n, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("sandbox %s/%s still there after an admitted delete (get: %v)", ns, n, err)
		}
	}

	t.Run("the host's DELETE without preconditions of a Sandbox at epoch 5 is refused", func(t *testing.T) {
		sbx := sandboxWithEpoch(t, "5")
		err := unconditional(env.Host, sbx.GetNamespace(), sbx.GetName())
		framework.ExpectDenied(t, "unconditional delete at epoch 5", err, framework.PolicyStrictDelete,
			"holder-epoch:", "preconditions.resourceVersion", "the stored holder epoch of Sandbox \""+sbx.GetName()+"\" is 5")
		if got := epochOf(t, sbx.GetNamespace(), sbx.GetName()); got != "5" {
			t.Errorf("stored epoch %q after a refused delete, want the Sandbox untouched at 5", got)
		}
	})
	t.Run("the host's fenced DELETE from pkg/fence carrying preconditions.resourceVersion is admitted", func(t *testing.T) {
		sbx := sandboxWithEpoch(t, "5")
		if err := hostClient(t).Delete(ctx, sbx.GetNamespace(), sbx.GetName(), fence.WriteOptions{Epoch: new(uint64(5))}); err != nil {
			t.Fatalf("fenced delete at epoch 5: %v", err)
		}
		expectGone(t, sbx.GetNamespace(), sbx.GetName())
	})
	t.Run("the host's DELETE without preconditions of a Sandbox at epoch 0 is admitted", func(t *testing.T) {
		sbx := sandboxWithEpoch(t, "0")
		framework.ExpectAdmitted(t, "unconditional delete at epoch 0", unconditional(env.Host, sbx.GetNamespace(), sbx.GetName()))
		expectGone(t, sbx.GetNamespace(), sbx.GetName())
	})
	t.Run("the host's DELETE without preconditions of a Sandbox without an epoch is admitted", func(t *testing.T) {
		sbx := sandboxWithEpoch(t, "")
		framework.ExpectAdmitted(t, "unconditional delete without an epoch", unconditional(env.Host, sbx.GetNamespace(), sbx.GetName()))
		expectGone(t, sbx.GetNamespace(), sbx.GetName())
	})
	t.Run("the other host's DELETE without preconditions in its own namespace is refused", func(t *testing.T) {
		sbx := mustCreate(t, env.OtherHost, framework.SandboxGVR,
			framework.MakeSandbox(env.OtherHostNamespace, name("other")).Annotation(fence.AnnotationHolderEpoch, "5").Obj())
		err := unconditional(env.OtherHost, sbx.GetNamespace(), sbx.GetName())
		framework.ExpectDenied(t, "other host's unconditional delete at epoch 5", err, framework.PolicyStrictDelete, "holder-epoch:")
	})
	t.Run("the operator's DELETE without preconditions of a Sandbox at epoch 5 is admitted", func(t *testing.T) {
		sbx := sandboxWithEpoch(t, "5")
		framework.ExpectAdmitted(t, "operator's unconditional delete at epoch 5", unconditional(env.Operator, sbx.GetNamespace(), sbx.GetName()))
		expectGone(t, sbx.GetNamespace(), sbx.GetName())
	})
	t.Run("the host's DELETE without preconditions of its claim is refused", func(t *testing.T) {
		claim := hostClaim(t)
		err := env.Host.Dynamic.Resource(framework.ClaimGVR).Namespace(claim.GetNamespace()).Delete(ctx, claim.GetName(), metav1.DeleteOptions{})
		framework.ExpectDenied(t, "unconditional claim delete", err, framework.PolicyStrictDelete,
			"holder-epoch:", "preconditions.resourceVersion", `SandboxClaim "`+claim.GetName()+`" is deleted with its Sandbox`)
	})
	t.Run("the host's claim DELETE from pkg/fence, after checking its Sandbox's epoch, is admitted", func(t *testing.T) {
		claim, sbx := claimWithSandbox(t, "4")
		if err := hostClient(t).DeleteClaim(ctx, claim.GetNamespace(), claim.GetName(), fence.WriteOptions{Epoch: new(uint64(4))}); err != nil {
			t.Fatalf("fenced claim delete at epoch 4: %v", err)
		}
		if _, err := env.Admin.Dynamic.Resource(framework.ClaimGVR).Namespace(claim.GetNamespace()).Get(ctx, claim.GetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("claim %s still there after an admitted delete (get: %v)", claim.GetName(), err)
		}
		if _, err := env.Admin.Dynamic.Resource(framework.SandboxGVR).Namespace(sbx.GetNamespace()).Get(ctx, sbx.GetName(), metav1.GetOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	})
	t.Run("pkg/fence refuses the claim DELETE of a stale holder, sending nothing", func(t *testing.T) {
		claim, _ := claimWithSandbox(t, "6")
		err := hostClient(t).DeleteClaim(ctx, claim.GetNamespace(), claim.GetName(), fence.WriteOptions{Epoch: new(uint64(4))})
		if !errors.Is(err, fence.ErrStaleEpoch) {
			t.Fatalf("stale claim delete: %v, want ErrStaleEpoch", err)
		}
		get(t, framework.ClaimGVR, claim.GetNamespace(), claim.GetName())
	})
	t.Run("the operator's DELETE without preconditions of a claim is admitted", func(t *testing.T) {
		claim := hostClaim(t)
		framework.ExpectAdmitted(t, "operator's unconditional claim delete",
			env.Operator.Dynamic.Resource(framework.ClaimGVR).Namespace(claim.GetNamespace()).Delete(ctx, claim.GetName(), metav1.DeleteOptions{}))
	})
}

// claimWithSandbox creates, as the host, a claim and a Sandbox at epoch
// that the claim owns, as the claim controller's adopted one is.
func claimWithSandbox(t *testing.T, epoch string) (claim, sbx *unstructured.Unstructured) {
	t.Helper()
	ns := env.HostNamespace
	claim = hostClaim(t)
	s := framework.MakeSandbox(ns, name("claimed")).Annotation(fence.AnnotationHolderEpoch, epoch).Obj()
	s.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: claim.GetAPIVersion(), Kind: claim.GetKind(), Name: claim.GetName(), UID: claim.GetUID()}})
	sbx = mustCreate(t, env.Host, framework.SandboxGVR, s)
	return claim, sbx
}

// enableStrictDelete turns strict delete on for the test and restores the
// default install when it ends, waiting until an unconditional DELETE is
// admitted again so that no later test sees it on.
func enableStrictDelete(t *testing.T) {
	t.Helper()
	ctx := testContext(t)
	probe := sandboxWithEpoch(t, "5")
	dryRunDelete := func(ctx context.Context) framework.Verdict {
		err := env.Host.Dynamic.Resource(framework.SandboxGVR).Namespace(probe.GetNamespace()).Delete(ctx, probe.GetName(),
			metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		return framework.VerdictOf(err)
	}
	// Registered first, so it runs after both switches are restored.
	t.Cleanup(func() {
		err := framework.Eventually(context.Background(), time.Minute, 100*time.Millisecond, "strict delete off again", func(ctx context.Context) (bool, string, error) {
			v := dryRunDelete(ctx)
			return v.Admitted, v.String(), nil
		})
		if err != nil {
			t.Errorf("restoring the default install: %v", err)
		}
	})

	addStrictDeleteBinding(t)

	configs := env.Admin.Dynamic.Resource(framework.FenceConfigGVR)
	cfg, err := configs.Get(ctx, fencev1.DefaultConfigName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("FenceConfig %s: %v", fencev1.DefaultConfigName, err)
	}
	was, set, _ := unstructured.NestedBool(cfg.Object, "spec", "strictDelete")
	if set && was {
		t.Fatalf("FenceConfig %s already has spec.strictDelete: true; the suite expects the default install", fencev1.DefaultConfigName)
	}
	restore := []byte(`{"spec":{"strictDelete":null}}`)
	if set {
		restore = []byte(`{"spec":{"strictDelete":false}}`)
	}
	t.Cleanup(func() {
		_, err := configs.Patch(context.Background(), fencev1.DefaultConfigName, types.MergePatchType, restore, metav1.PatchOptions{})
		if err != nil {
			t.Errorf("restore FenceConfig spec.strictDelete: %v", err)
		}
	})
	if _, err := configs.Patch(ctx, fencev1.DefaultConfigName, types.MergePatchType, []byte(`{"spec":{"strictDelete":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("set FenceConfig spec.strictDelete: %v", err)
	}

	// The API server's policy and param caches update asynchronously: wait
	// on the refusal itself.
	err = framework.Eventually(ctx, time.Minute, 100*time.Millisecond, "strict delete enforced", func(ctx context.Context) (bool, string, error) {
		v := dryRunDelete(ctx)
		return v.DeniedBy(framework.PolicyStrictDelete, "holder-epoch:") == nil, v.String(), nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// addStrictDeleteBinding applies what config/vap/components/strict-delete adds
// to the installed bundle (rendered on its base, as an admin would apply
// it): the binding of the strict-delete policy; it removes it at the end.
func addStrictDeleteBinding(t *testing.T) {
	t.Helper()
	ctx := testContext(t)
	root := repoRoot(t)
	kubectl, err := framework.Kubectl(root)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := framework.Kustomize(ctx, kubectl,
		componentOnBase(t, root, filepath.Join(root, "config", "vap", "components", "strict-delete")))
	if err != nil {
		t.Fatal(err)
	}
	var binding *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "ValidatingAdmissionPolicyBinding" && o.GetName() == framework.PolicyStrictDelete+"-binding" {
			binding = o
		}
	}
	if binding == nil {
		t.Fatalf("config/vap/components/strict-delete renders no binding %s-binding", framework.PolicyStrictDelete)
	}
	bindings := env.Admin.Dynamic.Resource(framework.VAPBindingGVR)
	if _, err := bindings.Create(ctx, binding, metav1.CreateOptions{FieldManager: framework.FieldManager}); err != nil {
		t.Fatalf("bind %s: %v", framework.PolicyStrictDelete, err)
	}
	t.Cleanup(func() {
		if err := bindings.Delete(context.Background(), binding.GetName(), metav1.DeleteOptions{}); err != nil {
			t.Errorf("unbind %s: %v", framework.PolicyStrictDelete, err)
		}
	})
}
