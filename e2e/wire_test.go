//go:build e2e

package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// The contract's first pod template vector and its hash: a refresh writes
// both, and the policy checks only the hash's shape.
const (
	specTemplate     = `{"metadata":{"labels":{"sandbox.namzu.ai/template":"namzu-workspace"}},"spec":{"containers":[{"image":"namzu/agent:1","name":"main","volumeDevices":[{"devicePath":"/dev/workspace","name":"workspace"}]}],"terminationGracePeriodSeconds":5}}`
	specTemplateHash = "sha256:83ff99a5673c470fbc66985bf98cf2f31440e270490233b4dea493daa38a6e03"
)

// storedState is what a wire body leaves on the Sandbox.
type storedState struct {
	Mode        string
	Annotations map[string]string
}

// The contract's fenced-write bodies not covered by epoch_test.go, each sent raw as the
// TypeScript host sends it and admitted through the real API server: the
// policy may never break today's host. Each raw body is also the body
// pkg/fence builds from the same read (semantically: the template's key
// order is free), so the Go host and the TypeScript host stay
// interchangeable.
func TestHolderEpochRawWireBodiesAreAdmitted(t *testing.T) {
	requirePolicy(t, framework.PolicyHolderEpoch)
	var template map[string]any
	if err := json.Unmarshal([]byte(specTemplate), &template); err != nil {
		t.Fatal(err)
	}
	if got, err := fence.PodTemplateHash(template); err != nil || got != specTemplateHash {
		t.Fatalf("PodTemplateHash(the contract's vector) = %q, %v; want %s", got, err, specTemplateHash)
	}
	refreshTests := []fence.Operation{{Op: fence.OpTest, Path: "/spec/operatingMode", Value: fence.ModeSuspended}}
	hash := []fence.Annotation{{Key: fence.AnnotationPodTemplateHash, Value: specTemplateHash}}
	tests := []struct {
		name    string
		sandbox func() *framework.Builder
		// in is what pkg/fence is given for the same write (Read is filled
		// from the created object).
		in   fence.PatchInput
		body string
		want storedState
	}{
		{
			name: "a fenced suspend of an object whose annotations map lacks the epoch key tests the resourceVersion and adds keys one by one",
			sandbox: func() *framework.Builder {
				return framework.MakeSandbox(env.HostNamespace, name("nokey")).Annotation("team", "blue")
			},
			in: fence.PatchInput{Epoch: new(uint64(3)), Mode: fence.ModeSuspended, ChangedAt: changedAt},
			body: `[{"op":"test","path":"/metadata/resourceVersion","value":"{{rv}}"},
 {"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"3"},
 {"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1operating-mode-changed-at","value":"2026-08-01T09:00:00.000Z"},
 {"op":"add","path":"/spec/operatingMode","value":"Suspended"}]`,
			want: storedState{Mode: "Suspended", Annotations: map[string]string{
				"team": "blue", fence.AnnotationHolderEpoch: "3", fence.AnnotationOperatingModeChangedAt: changedAt,
			}},
		},
		{
			name: "a stamp sends the epoch alone and leaves the mode",
			sandbox: func() *framework.Builder {
				return framework.MakeSandbox(env.HostNamespace, name("stamp")).Annotation(fence.AnnotationHolderEpoch, "2")
			},
			in: fence.PatchInput{Epoch: new(uint64(3))},
			body: `[{"op":"test","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"2"},
 {"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"3"}]`,
			want: storedState{Mode: "Running", Annotations: map[string]string{fence.AnnotationHolderEpoch: "3"}},
		},
		{
			name: "a fenced refresh of a Suspended workspace replaces the template and resumes it",
			sandbox: func() *framework.Builder {
				return framework.MakeSandbox(env.HostNamespace, name("refresh")).Mode("Suspended").Annotation(fence.AnnotationHolderEpoch, "4")
			},
			in: fence.PatchInput{Epoch: new(uint64(4)), Mode: fence.ModeRunning, ChangedAt: changedAt, ExtraAnnotations: hash, PodTemplate: template, ExtraTests: refreshTests},
			body: `[{"op":"test","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"4"},
 {"op":"test","path":"/spec/operatingMode","value":"Suspended"},
 {"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"4"},
 {"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1operating-mode-changed-at","value":"2026-08-01T09:00:00.000Z"},
 {"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1pod-template-hash","value":"{{hash}}"},
 {"op":"add","path":"/spec/podTemplate","value":{{template}}},
 {"op":"add","path":"/spec/operatingMode","value":"Running"}]`,
			want: storedState{Mode: "Running", Annotations: map[string]string{
				fence.AnnotationHolderEpoch: "4", fence.AnnotationOperatingModeChangedAt: changedAt, fence.AnnotationPodTemplateHash: specTemplateHash,
			}},
		},
		{
			name: "an unfenced refresh of a workspace another holder fenced keeps the stored epoch",
			sandbox: func() *framework.Builder {
				return framework.MakeSandbox(env.HostNamespace, name("refresh")).Mode("Suspended").Annotation(fence.AnnotationHolderEpoch, "4")
			},
			in: fence.PatchInput{Mode: fence.ModeRunning, ChangedAt: changedAt, ExtraAnnotations: hash, PodTemplate: template, ExtraTests: refreshTests},
			body: `[{"op":"test","path":"/spec/operatingMode","value":"Suspended"},
 {"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1operating-mode-changed-at","value":"2026-08-01T09:00:00.000Z"},
 {"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1pod-template-hash","value":"{{hash}}"},
 {"op":"add","path":"/spec/podTemplate","value":{{template}}},
 {"op":"add","path":"/spec/operatingMode","value":"Running"}]`,
			want: storedState{Mode: "Running", Annotations: map[string]string{
				fence.AnnotationHolderEpoch: "4", fence.AnnotationOperatingModeChangedAt: changedAt, fence.AnnotationPodTemplateHash: specTemplateHash,
			}},
		},
		{
			name: "an unfenced refresh of an object without annotations tests the resourceVersion before adding the whole map",
			sandbox: func() *framework.Builder {
				return framework.MakeSandbox(env.HostNamespace, name("refresh")).Mode("Suspended")
			},
			in: fence.PatchInput{Mode: fence.ModeRunning, ChangedAt: changedAt, ExtraAnnotations: hash, PodTemplate: template, ExtraTests: refreshTests},
			body: `[{"op":"test","path":"/spec/operatingMode","value":"Suspended"},
 {"op":"test","path":"/metadata/resourceVersion","value":"{{rv}}"},
 {"op":"add","path":"/metadata/annotations","value":{"sandbox.namzu.ai/operating-mode-changed-at":"2026-08-01T09:00:00.000Z","sandbox.namzu.ai/pod-template-hash":"{{hash}}"}},
 {"op":"add","path":"/spec/podTemplate","value":{{template}}},
 {"op":"add","path":"/spec/operatingMode","value":"Running"}]`,
			want: storedState{Mode: "Running", Annotations: map[string]string{
				fence.AnnotationOperatingModeChangedAt: changedAt, fence.AnnotationPodTemplateHash: specTemplateHash,
			}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sbx := mustCreate(t, env.Host, framework.SandboxGVR, tc.sandbox().Obj())
			ns, n := sbx.GetNamespace(), sbx.GetName()
			body := rawBody(tc.body, "rv", sbx.GetResourceVersion(), "hash", specTemplateHash, "template", specTemplate)

			in := tc.in
			in.Read = fence.ReadHolderEpoch(sbx)
			ops, err := fence.BuildHolderEpochPatch(in)
			if err != nil {
				t.Fatal(err)
			}
			built, err := fence.MarshalPatch(ops)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(decodeJSON(t, body), decodeJSON(t, built)); d != "" {
				t.Errorf("pkg/fence builds another body for the same write (-raw +built):\n%s", d)
			}

			framework.ExpectAdmitted(t, string(body), patch(t, env.Host, framework.SandboxGVR, ns, n, types.JSONPatchType, body))
			got := get(t, framework.SandboxGVR, ns, n)
			mode, _, _ := unstructured.NestedString(got.Object, "spec", "operatingMode")
			if d := cmp.Diff(tc.want, storedState{Mode: mode, Annotations: got.GetAnnotations()}); d != "" {
				t.Errorf("stored state (-want +got):\n%s", d)
			}
			// Only a field the refreshed template added is compared: CRD
			// defaulting may extend a stored template.
			if tc.in.PodTemplate != nil {
				containers, _, _ := unstructured.NestedSlice(got.Object, "spec", "podTemplate", "spec", "containers")
				if len(containers) != 1 || containers[0].(map[string]any)["volumeDevices"] == nil {
					t.Errorf("stored containers are not the refreshed template's: %v", containers)
				}
			}
		})
	}
}

func decodeJSON(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

// The fenced DELETE through the real API server: an unfenced writer moves the
// object between the host's gate read and its fenced DELETE, the API server
// fails the precondition with 409, and the library re-reads, re-checks the
// epoch (unchanged) and deletes on the second attempt. A second delete of
// the gone Sandbox counts as success (404).
func TestFencedDeleteRetriesAfterAConflict(t *testing.T) {
	ctx := testContext(t)
	sbx := sandboxWithEpoch(t, "3")
	ns, n := sbx.GetNamespace(), sbx.GetName()
	unfenced := func() error {
		return patch(t, env.Operator, framework.SandboxGVR, ns, n, types.MergePatchType, []byte(`{"metadata":{"labels":{"touched":"yes"}}}`))
	}
	c, codes := interleaved(t, env.Host, http.MethodDelete, unfenced)
	if err := c.Delete(ctx, ns, n, fence.WriteOptions{Epoch: new(uint64(3))}); err != nil {
		t.Fatalf("fenced delete at epoch 3 after a concurrent unfenced write: %v", err)
	}
	if d := cmp.Diff([]int{http.StatusConflict, http.StatusOK}, codes()); d != "" {
		t.Errorf("DELETE status codes (-want +got):\n%s", d)
	}
	if _, err := env.Admin.Dynamic.Resource(framework.SandboxGVR).Namespace(ns).Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("sandbox still there after the retried delete (get: %v)", err)
	}
	if err := c.Delete(ctx, ns, n, fence.WriteOptions{Epoch: new(uint64(3))}); err != nil {
		t.Errorf("deleting a Sandbox already gone: want success (404 counts as deleted), got %v", err)
	}
}

// The same 409, but the writer in between is a new holder raising the
// epoch: the re-read finds the workspace fenced off and the old holder stops
// without a second DELETE. The workspace survives with the new epoch.
func TestFencedDeleteStopsWhenANewHolderMovedIn(t *testing.T) {
	ctx := testContext(t)
	sbx := sandboxWithEpoch(t, "3")
	ns, n := sbx.GetNamespace(), sbx.GetName()
	newHolder := func() error {
		_, err := hostClient(t).Stamp(ctx, ns, n, fence.WriteOptions{Epoch: new(uint64(4))})
		return err
	}
	c, codes := interleaved(t, env.Host, http.MethodDelete, newHolder)
	if err := c.Delete(ctx, ns, n, fence.WriteOptions{Epoch: new(uint64(3))}); !errors.Is(err, fence.ErrStaleEpoch) {
		t.Fatalf("old holder's fenced delete: want ErrStaleEpoch after the 409 and re-read, got %v", err)
	}
	if d := cmp.Diff([]int{http.StatusConflict}, codes()); d != "" {
		t.Errorf("DELETE status codes (-want +got):\n%s", d)
	}
	if got := epochOf(t, ns, n); got != "4" {
		t.Errorf("stored epoch %q, want the new holder's 4 on a Sandbox that still exists", got)
	}
}

// The contract's literal fenced DELETE body, sent raw: a precondition on a resourceVersion
// that moved is refused with 409 and deletes nothing; on the current one it
// deletes.
func TestFencedDeleteRawSpecBody(t *testing.T) {
	ctx := testContext(t)
	sbx := sandboxWithEpoch(t, "3")
	ns, n := sbx.GetNamespace(), sbx.GetName()
	stale := sbx.GetResourceVersion()
	framework.ExpectAdmitted(t, "unfenced write moving the resourceVersion",
		patch(t, env.Operator, framework.SandboxGVR, ns, n, types.MergePatchType, []byte(`{"metadata":{"labels":{"touched":"yes"}}}`)))
	current := get(t, framework.SandboxGVR, ns, n).GetResourceVersion()

	send := func(rv string) error {
		body := rawBody(`{"apiVersion":"v1","kind":"DeleteOptions","preconditions":{"resourceVersion":"{{rv}}"}}`, "rv", rv)
		return env.Host.Kube.CoreV1().RESTClient().Delete().
			AbsPath(fmt.Sprintf("/apis/agents.x-k8s.io/v1beta1/namespaces/%s/sandboxes/%s", ns, n)).
			SetHeader("Content-Type", "application/json").Body(body).Do(ctx).Error()
	}
	if err := send(stale); !apierrors.IsConflict(err) {
		t.Fatalf("DELETE with the stale resourceVersion %s: want 409 Conflict, got %v", stale, framework.VerdictOf(err))
	}
	if got := epochOf(t, ns, n); got != "3" {
		t.Errorf("stored epoch %q after a refused delete, want the Sandbox untouched at 3", got)
	}
	framework.ExpectAdmitted(t, "DELETE with the current resourceVersion "+current, send(current))
	if _, err := env.Admin.Dynamic.Resource(framework.SandboxGVR).Namespace(ns).Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("sandbox still there after the admitted delete (get: %v)", err)
	}
}
