//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// A malformed stored epoch can only exist from before the fence was
// installed; seeding one needs the holder-epoch binding removed for a moment.
// Then two rules are checked on the real server: an unchanged malformed value
// passes, and only break-glass may change it, never a host.
func TestMalformedStoredEpochOnlyBreakGlassMayRepair(t *testing.T) {
	requirePolicy(t, framework.PolicyHolderEpoch)
	requirePolicy(t, framework.PolicyHolderEpochRepair)
	ctx := testContext(t)
	ns := env.HostNamespace
	names := map[string]string{"repair": name("broken"), "remove": name("broken"), "host": name("broken")}
	err := env.WithoutHolderEpochBinding(ctx, func() error {
		for _, n := range names {
			if _, err := create(t, env.Admin, framework.SandboxGVR, framework.MakeSandbox(ns, n).Annotation(fence.AnnotationHolderEpoch, "01").Obj()); err != nil {
				return fmt.Errorf("seed %s: %w", n, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	epoch := func(v string) []byte {
		return []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, fence.AnnotationHolderEpoch, v))
	}
	removeEpoch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, fence.AnnotationHolderEpoch))

	framework.ExpectAdmitted(t, "host's unfenced write leaving the malformed value alone (rule 2)",
		patch(t, env.Host, framework.SandboxGVR, ns, names["host"], types.MergePatchType, []byte(`{"spec":{"operatingMode":"Suspended"}}`)))
	framework.ExpectDenied(t, "host replaces the malformed value with a well-formed one (rule 6)",
		patch(t, env.Host, framework.SandboxGVR, ns, names["host"], types.MergePatchType, epoch("5")), framework.PolicyHolderEpoch)
	framework.ExpectDenied(t, "host replaces the malformed value with another malformed one (rule 2)",
		patch(t, env.Host, framework.SandboxGVR, ns, names["host"], types.MergePatchType, epoch("02")), framework.PolicyHolderEpoch)
	framework.ExpectDenied(t, "operator (namespace admin, not break-glass) repairs it (rule 6)",
		patch(t, env.Operator, framework.SandboxGVR, ns, names["repair"], types.MergePatchType, epoch("5")), framework.PolicyHolderEpochRepair)

	framework.ExpectAdmitted(t, "break-glass repairs it to a well-formed epoch",
		patch(t, env.BreakGlass, framework.SandboxGVR, ns, names["repair"], types.MergePatchType, epoch("5")))
	if got := epochOf(t, ns, names["repair"]); got != "5" {
		t.Errorf("stored epoch after the repair %q, want 5", got)
	}
	framework.ExpectAdmitted(t, "break-glass removes the malformed value",
		patch(t, env.BreakGlass, framework.SandboxGVR, ns, names["remove"], types.MergePatchType, removeEpoch))
	got, err := env.Admin.Dynamic.Resource(framework.SandboxGVR).Namespace(ns).Get(context.Background(), names["remove"], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := got.GetAnnotations()[fence.AnnotationHolderEpoch]; ok {
		t.Errorf("epoch %q still stored after break-glass removed it", v)
	}
}

// A write that leaves a backend annotation unchanged is always admitted
// even when the value is over the 16384-character
// limit (which only a value from before the fence can be): before the fix
// such a Sandbox refused every write, the operator's and the host's
// unfenced ones included, and the controller could not remove its
// finalizer.
func TestUnchangedOverLongAnnotationDoesNotBlockWrites(t *testing.T) {
	requirePolicy(t, framework.PolicyHolderEpoch)
	ctx := testContext(t)
	ns := env.HostNamespace
	n := name("overlong")
	err := env.WithoutHolderEpochBinding(ctx, func() error {
		_, err := create(t, env.Admin, framework.SandboxGVR, framework.MakeSandbox(ns, n).
			Annotation(fence.AnnotationHolderEpoch, "1").
			Annotation(fence.AnnotationPodTemplateHash, strings.Repeat("h", 20000)).
			Finalizer("example.com/hold").Obj())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("a host's changed over-long value is refused with the limit", func(t *testing.T) {
		framework.RequirePorted(t, env, "the 16384-character guard on backend annotations")
		framework.ExpectDenied(t, "the host rewrites the hash with another over-long value",
			patch(t, env.Host, framework.SandboxGVR, ns, n, types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, fence.AnnotationPodTemplateHash, strings.Repeat("h", 20001)))),
			framework.PolicyHolderEpoch, "over the 16384-character limit")
	})
	t.Run("the unchanged over-long value blocks no write", func(t *testing.T) {
		framework.ExpectAdmitted(t, "the operator labels the Sandbox",
			patch(t, env.Operator, framework.SandboxGVR, ns, n, types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"a"}}}`)))
		framework.ExpectAdmitted(t, "the host's unfenced suspend",
			patch(t, env.Host, framework.SandboxGVR, ns, n, types.MergePatchType, []byte(`{"spec":{"operatingMode":"Suspended"}}`)))
		framework.ExpectAdmitted(t, "the finalizer's owner removes it",
			patch(t, env.Admin, framework.SandboxGVR, ns, n, types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`)))
	})
}
