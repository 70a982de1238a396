//go:build e2e

package e2e

import (
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

const changedAt = "2026-08-01T09:00:00.000Z"

// The host's own wire bodies (pkg/fence) against the shipped holder-epoch
// policy: a well-formed epoch at least the stored one is admitted, a lower one
// refused, through the one write path the host uses.
func TestHolderEpochJSONPatchFromTheHostLibrary(t *testing.T) {
	requirePolicy(t, framework.PolicyHolderEpoch)
	tests := []struct {
		name     string
		stored   string // "" = no annotations map at all
		epoch    uint64
		admitted bool
	}{
		{name: "a re-stamp with the stored epoch is admitted", stored: "2", epoch: 2, admitted: true},
		{name: "raising the epoch is admitted", stored: "2", epoch: 3, admitted: true},
		{name: "lowering the epoch is denied", stored: "3", epoch: 2},
		{name: "lowering to zero is denied", stored: "1", epoch: 0},
		{name: "stamping an object that has no annotations map is admitted", stored: "", epoch: 5, admitted: true},
		{name: "raising to the final epoch 2^53-1 is admitted", stored: "7", epoch: fence.MaxEpoch, admitted: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sbx := sandboxWithEpoch(t, tc.stored)
			ops, err := fence.BuildHolderEpochPatch(fence.PatchInput{
				Read:      fence.ReadHolderEpoch(sbx),
				Epoch:     new(tc.epoch),
				Mode:      fence.ModeSuspended,
				ChangedAt: changedAt,
			})
			if err != nil {
				t.Fatal(err)
			}
			body, err := fence.MarshalPatch(ops)
			if err != nil {
				t.Fatal(err)
			}
			err = patch(t, env.Host, framework.SandboxGVR, sbx.GetNamespace(), sbx.GetName(), types.JSONPatchType, body)
			if tc.admitted {
				framework.ExpectAdmitted(t, string(body), err)
				if got, want := epochOf(t, sbx.GetNamespace(), sbx.GetName()), fence.FormatEpoch(tc.epoch); got != want {
					t.Errorf("stored epoch %q after an admitted write, want %q", got, want)
				}
				return
			}
			framework.ExpectDenied(t, string(body), err, framework.PolicyHolderEpoch)
			if got := epochOf(t, sbx.GetNamespace(), sbx.GetName()); got != tc.stored {
				t.Errorf("stored epoch %q after a denied write, want it unchanged %q", got, tc.stored)
			}
		})
	}
}

// The contract's literal fenced-write bodies, byte for byte as the TypeScript host sends
// them, must be admitted: the policy may never break today's host.
func TestHolderEpochRawSpecBodiesAreAdmitted(t *testing.T) {
	t.Run("steady-state fenced suspend", func(t *testing.T) {
		sbx := sandboxWithEpoch(t, "2")
		body := rawBody(`[{"op":"test","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"2"},
 {"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"2"},
 {"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1operating-mode-changed-at","value":"2026-08-01T09:00:00.000Z"},
 {"op":"add","path":"/spec/operatingMode","value":"Suspended"}]`)
		framework.ExpectAdmitted(t, "the contract's steady-state body", patch(t, env.Host, framework.SandboxGVR, sbx.GetNamespace(), sbx.GetName(), types.JSONPatchType, body))
		got := get(t, framework.SandboxGVR, sbx.GetNamespace(), sbx.GetName())
		if mode := got.Object["spec"].(map[string]any)["operatingMode"]; mode != "Suspended" {
			t.Errorf("operatingMode %v, want Suspended", mode)
		}
	})
	t.Run("migration of an object without annotations", func(t *testing.T) {
		sbx := sandboxWithEpoch(t, "")
		body := rawBody(`[{"op":"test","path":"/metadata/resourceVersion","value":"{{rv}}"},
 {"op":"add","path":"/metadata/annotations","value":{"sandbox.namzu.ai/holder-epoch":"3","sandbox.namzu.ai/operating-mode-changed-at":"2026-08-01T09:00:00.000Z"}},
 {"op":"add","path":"/spec/operatingMode","value":"Suspended"}]`, "rv", sbx.GetResourceVersion())
		framework.ExpectAdmitted(t, "the contract's migration body", patch(t, env.Host, framework.SandboxGVR, sbx.GetNamespace(), sbx.GetName(), types.JSONPatchType, body))
		if got := epochOf(t, sbx.GetNamespace(), sbx.GetName()); got != "3" {
			t.Errorf("stored epoch %q, want 3", got)
		}
	})
}

// Every way to write the main resource arrives at admission as CREATE or
// UPDATE; the rule must hold on each.
func TestHolderEpochOnEveryWritePath(t *testing.T) {
	requirePolicy(t, framework.PolicyHolderEpoch)
	epochKey := fence.AnnotationHolderEpoch
	mergeEpoch := func(e string) []byte {
		return []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, epochKey, e))
	}
	applyEpoch := func(version, ns, n, e string) []byte {
		return []byte(fmt.Sprintf(`{"apiVersion":"agents.x-k8s.io/%s","kind":"Sandbox","metadata":{"name":%q,"namespace":%q,"annotations":{%q:%q}}}`, version, n, ns, epochKey, e))
	}

	t.Run("create with a malformed epoch is denied", func(t *testing.T) {
		for _, bad := range []string{"01", "-1", "1e3", " 1", "9007199254740992"} {
			_, err := create(t, env.Host, framework.SandboxGVR, framework.MakeSandbox(env.HostNamespace, name("bad")).Annotation(epochKey, bad).Obj())
			framework.ExpectDenied(t, "create with epoch "+bad, err, framework.PolicyHolderEpoch)
		}
	})
	t.Run("an unfenced merge patch of a fenced object is admitted and keeps the epoch", func(t *testing.T) {
		sbx := sandboxWithEpoch(t, "4")
		body := []byte(`{"metadata":{"annotations":{"sandbox.namzu.ai/operating-mode-changed-at":"2026-08-01T09:00:00.000Z"}},"spec":{"operatingMode":"Suspended"}}`)
		framework.ExpectAdmitted(t, "unfenced merge patch", patch(t, env.Host, framework.SandboxGVR, sbx.GetNamespace(), sbx.GetName(), types.MergePatchType, body))
		if got := epochOf(t, sbx.GetNamespace(), sbx.GetName()); got != "4" {
			t.Errorf("stored epoch %q, want 4", got)
		}
	})
	t.Run("a merge patch lowering the epoch is denied", func(t *testing.T) {
		sbx := sandboxWithEpoch(t, "4")
		framework.ExpectDenied(t, "merge patch 4 -> 3", patch(t, env.Host, framework.SandboxGVR, sbx.GetNamespace(), sbx.GetName(), types.MergePatchType, mergeEpoch("3")), framework.PolicyHolderEpoch)
	})
	t.Run("a merge patch removing a non-zero epoch is denied", func(t *testing.T) {
		sbx := sandboxWithEpoch(t, "4")
		body := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, epochKey))
		framework.ExpectDenied(t, "remove epoch 4", patch(t, env.Host, framework.SandboxGVR, sbx.GetNamespace(), sbx.GetName(), types.MergePatchType, body), framework.PolicyHolderEpoch)
	})
	t.Run("a merge patch removing epoch 0 is admitted", func(t *testing.T) {
		sbx := sandboxWithEpoch(t, "0")
		body := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, epochKey))
		framework.ExpectAdmitted(t, "remove epoch 0", patch(t, env.Host, framework.SandboxGVR, sbx.GetNamespace(), sbx.GetName(), types.MergePatchType, body))
	})
	t.Run("server-side apply lowering the epoch is denied and raising it is admitted", func(t *testing.T) {
		sbx := sandboxWithEpoch(t, "4")
		ns, n := sbx.GetNamespace(), sbx.GetName()
		framework.ExpectDenied(t, "apply 4 -> 3", patch(t, env.Host, framework.SandboxGVR, ns, n, types.ApplyPatchType, applyEpoch("v1beta1", ns, n, "3")), framework.PolicyHolderEpoch)
		framework.ExpectAdmitted(t, "apply 4 -> 5", patch(t, env.Host, framework.SandboxGVR, ns, n, types.ApplyPatchType, applyEpoch("v1beta1", ns, n, "5")))
	})
	t.Run("PUT lowering the epoch is denied and raising it is admitted", func(t *testing.T) {
		sbx := sandboxWithEpoch(t, "4")
		ctx := testContext(t)
		ri := env.Operator.Dynamic.Resource(framework.SandboxGVR).Namespace(sbx.GetNamespace())
		lower := sbx.DeepCopy()
		lower.SetAnnotations(map[string]string{epochKey: "3"})
		_, err := ri.Update(ctx, lower, metav1.UpdateOptions{})
		framework.ExpectDenied(t, "PUT 4 -> 3 as operator", err, framework.PolicyHolderEpoch)
		raise := sbx.DeepCopy()
		raise.SetAnnotations(map[string]string{epochKey: "6"})
		_, err = ri.Update(ctx, raise, metav1.UpdateOptions{})
		framework.ExpectAdmitted(t, "PUT 4 -> 6 as operator", err)
	})
	t.Run("the host holds no update verb: its PUT is refused by RBAC", func(t *testing.T) {
		sbx := sandboxWithEpoch(t, "4")
		_, err := env.Host.Dynamic.Resource(framework.SandboxGVR).Namespace(sbx.GetNamespace()).Update(testContext(t), sbx, metav1.UpdateOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("host PUT: want 403 from RBAC (the host Role grants no update), got %v", framework.VerdictOf(err))
		}
	})
	t.Run("a status write cannot move the epoch and is not blocked", func(t *testing.T) {
		sbx := sandboxWithEpoch(t, "4")
		err := patch(t, env.Operator, framework.SandboxGVR, sbx.GetNamespace(), sbx.GetName(), types.MergePatchType, mergeEpoch("1"), "status")
		framework.ExpectAdmitted(t, "status merge patch carrying epoch 1", err)
		if got := epochOf(t, sbx.GetNamespace(), sbx.GetName()); got != "4" {
			t.Errorf("stored epoch %q after a status write, want 4 (the status strategy keeps metadata)", got)
		}
	})
	t.Run("v1alpha1 writes are fenced like v1beta1", func(t *testing.T) {
		if !env.ConversionServed {
			t.Skip("v1alpha1 is not served without conversion on this cluster (the Sandbox CRD names a conversion webhook that is not running)")
		}
		sbx := sandboxWithEpoch(t, "4")
		ns, n := sbx.GetNamespace(), sbx.GetName()
		framework.ExpectDenied(t, "v1alpha1 merge patch 4 -> 3", patch(t, env.Host, framework.SandboxV1a1GVR, ns, n, types.MergePatchType, mergeEpoch("3")), framework.PolicyHolderEpoch)
		framework.ExpectDenied(t, "v1alpha1 apply 4 -> 2", patch(t, env.Host, framework.SandboxV1a1GVR, ns, n, types.ApplyPatchType, applyEpoch("v1alpha1", ns, n, "2")), framework.PolicyHolderEpoch)
		framework.ExpectAdmitted(t, "v1alpha1 merge patch 4 -> 5", patch(t, env.Host, framework.SandboxV1a1GVR, ns, n, types.MergePatchType, mergeEpoch("5")))
		_, err := create(t, env.Host, framework.SandboxV1a1GVR, framework.MakeSandbox(ns, name("alpha")).Version("v1alpha1").Annotation(epochKey, "01").Obj())
		framework.ExpectDenied(t, "v1alpha1 create with epoch 01", err, framework.PolicyHolderEpoch)
	})
}
