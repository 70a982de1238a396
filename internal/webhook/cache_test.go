package webhook_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/sandbox-fence/sandbox-fence/internal/admit"
	tst "github.com/sandbox-fence/sandbox-fence/internal/testing"
	"github.com/sandbox-fence/sandbox-fence/internal/webhook"
)

func TestTrimOwner(t *testing.T) {
	claim := tst.MakeClaim("a").OwnedBy(tst.MakeSandbox("x").Obj()).Deleting().Obj()
	claim.SetResourceVersion("7")
	claim.SetLabels(map[string]string{"team": "a"})
	claim.Object["status"] = map[string]any{"conditions": []any{"big"}}
	// The builders carry what the rules do not read (spec.warmPoolRef, the
	// PodSpec, operatingMode): trimming must drop it.
	sandbox := tst.MakeSandbox("s").Obj()

	cases := []struct {
		name string
		kind admit.OwnerKind
		in   any
		want any
	}{{
		name: "a claim keeps its identity, deletion, owners and pod labels and nothing else",
		kind: admit.ClaimOwner,
		in:   claim,
		want: &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
			"metadata": map[string]any{
				"name": "a", "namespace": tst.Namespace, "uid": "uid-a", "resourceVersion": "7",
				"deletionTimestamp": claim.Object["metadata"].(map[string]any)["deletionTimestamp"],
				"ownerReferences":   claim.Object["metadata"].(map[string]any)["ownerReferences"],
			},
			"spec": map[string]any{"additionalPodMetadata": map[string]any{"labels": map[string]any{tst.LabelKey: "a"}}},
		}},
	}, {
		name: "a Sandbox drops its PodSpec and keeps its pod labels",
		kind: admit.SandboxOwner,
		in:   sandbox,
		want: &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
			"metadata": map[string]any{"name": "s", "namespace": tst.Namespace, "uid": "uid-s"},
			"spec": map[string]any{"podTemplate": map[string]any{"metadata": map[string]any{"labels": map[string]any{
				tst.LabelKey: "s", "sandbox.namzu.ai/template": "namzu-workspace"}}}},
		}},
	}, {
		name: "pod labels of the wrong type are kept as they are for the rule to refuse",
		kind: admit.ClaimOwner,
		in:   &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"additionalPodMetadata": map[string]any{"labels": "oops"}}}},
		want: &unstructured.Unstructured{Object: map[string]any{"apiVersion": "", "kind": "",
			"spec": map[string]any{"additionalPodMetadata": map[string]any{"labels": "oops"}}}},
	}, {
		name: "a deletion tombstone passes through",
		kind: admit.ClaimOwner,
		in:   toolscache.DeletedFinalStateUnknown{Key: "ns/a"},
		want: toolscache.DeletedFinalStateUnknown{Key: "ns/a"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := webhook.TrimOwner(tc.kind)(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
