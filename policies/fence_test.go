package policies_test

import (
	"context"
	"encoding/json"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/sandbox-fence/sandbox-fence/internal/vapeval"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// The Go host (pkg/fence) and the shipped policies must agree: every body
// the client builds for an allowed write is admitted. A disagreement would
// strand a correct host behind a 422 it cannot fix.

const (
	hostUser  = "system:serviceaccount:sbx:sandbox-host"
	changedAt = "2026-08-01T09:00:00.000Z"
)

var (
	sandboxGVK = schema.GroupVersionKind{Group: "agents.x-k8s.io", Version: "v1beta1", Kind: "Sandbox"}
	cnpGVK     = schema.GroupVersionKind{Group: "cilium.io", Version: "v2", Kind: "CiliumNetworkPolicy"}
)

func epoch(n uint64) *uint64 { return &n }

// storedSandbox is a Sandbox as the API server returns it.
func storedSandbox(annotations map[string]string, mode string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agents.x-k8s.io/v1beta1",
		"kind":       "Sandbox",
		"metadata":   map[string]any{"name": "ws-1", "namespace": "sbx", "resourceVersion": "1001", "uid": "a4d1c2b3-0000-4000-8000-000000000001"},
		"spec": map[string]any{
			"operatingMode": mode,
			"podTemplate":   map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "main", "image": "namzu/agent:1"}}}},
		},
	}}
	if annotations != nil {
		u.SetAnnotations(annotations)
	}
	return u
}

func TestFencePatchesAreAdmitted(t *testing.T) {
	template := map[string]any{"metadata": map[string]any{"labels": map[string]any{fence.LabelTemplate: "namzu-workspace"}},
		"spec": map[string]any{"containers": []any{map[string]any{"name": "main", "image": "namzu/agent:2"}}}}
	hash, err := fence.PodTemplateHash(template)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		old   *unstructured.Unstructured
		input func(r fence.Reading) fence.PatchInput
	}{
		{"steady-state fenced suspend", storedSandbox(map[string]string{fence.AnnotationHolderEpoch: "2"}, fence.ModeRunning),
			func(r fence.Reading) fence.PatchInput {
				return fence.PatchInput{Read: r, Epoch: epoch(2), Mode: fence.ModeSuspended, ChangedAt: changedAt}
			}},
		{"fenced resume raising the epoch", storedSandbox(map[string]string{fence.AnnotationHolderEpoch: "2", "other": "x"}, fence.ModeSuspended),
			func(r fence.Reading) fence.PatchInput {
				return fence.PatchInput{Read: r, Epoch: epoch(9), Mode: fence.ModeRunning, ChangedAt: changedAt}
			}},
		{"migration of an object without annotations", storedSandbox(nil, fence.ModeRunning),
			func(r fence.Reading) fence.PatchInput {
				return fence.PatchInput{Read: r, Epoch: epoch(3), Mode: fence.ModeSuspended, ChangedAt: changedAt}
			}},
		{"first stamp on an object with other annotations", storedSandbox(map[string]string{"example.com/x": "y"}, fence.ModeRunning),
			func(r fence.Reading) fence.PatchInput { return fence.PatchInput{Read: r, Epoch: epoch(1)} }},
		{"stamp only at the final epoch", storedSandbox(map[string]string{fence.AnnotationHolderEpoch: "9007199254740991"}, fence.ModeRunning),
			func(r fence.Reading) fence.PatchInput {
				return fence.PatchInput{Read: r, Epoch: epoch(fence.MaxEpoch)}
			}},
		{"fenced template refresh", storedSandbox(map[string]string{fence.AnnotationHolderEpoch: "4", fence.AnnotationPodTemplateHash: "sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}, fence.ModeSuspended),
			func(r fence.Reading) fence.PatchInput {
				return fence.PatchInput{Read: r, Epoch: epoch(4), Mode: fence.ModeRunning, ChangedAt: changedAt,
					ExtraAnnotations: []fence.Annotation{{Key: fence.AnnotationPodTemplateHash, Value: hash}}, PodTemplate: template,
					ExtraTests: []fence.Operation{{Op: fence.OpTest, Path: "/spec/operatingMode", Value: fence.ModeSuspended}}}
			}},
		{"unfenced JSON Patch adding annotations to an object without a map", storedSandbox(nil, fence.ModeRunning),
			func(r fence.Reading) fence.PatchInput {
				return fence.PatchInput{Read: r, Mode: fence.ModeSuspended, ChangedAt: changedAt}
			}},
	}
	h := harness(t, suite(t), vapeval.CaseParams{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ops, err := fence.BuildHolderEpochPatch(tt.input(fence.ReadHolderEpoch(tt.old)))
			if err != nil {
				t.Fatal(err)
			}
			body, err := fence.MarshalPatch(ops)
			if err != nil {
				t.Fatal(err)
			}
			patch, err := jsonpatch.DecodePatch(body)
			if err != nil {
				t.Fatal(err)
			}
			admitUpdate(t, h, tt.old, func(doc []byte) ([]byte, error) { return patch.Apply(doc) })
		})
	}
	t.Run("unfenced merge patch", func(t *testing.T) {
		old := storedSandbox(map[string]string{fence.AnnotationHolderEpoch: "7"}, fence.ModeRunning)
		body, err := fence.BuildMergePatch(fence.PatchInput{Read: fence.ReadHolderEpoch(old), Mode: fence.ModeSuspended, ChangedAt: changedAt})
		if err != nil {
			t.Fatal(err)
		}
		admitUpdate(t, h, old, func(doc []byte) ([]byte, error) { return jsonpatch.MergePatch(doc, body) })
	})
}

// admitUpdate applies a patch to old as the API server would and requires
// the UPDATE old -> new to be admitted by the whole bundle.
func admitUpdate(t *testing.T, h *vapeval.Harness, old *unstructured.Unstructured, apply func([]byte) ([]byte, error)) {
	t.Helper()
	doc, err := json.Marshal(old.Object)
	if err != nil {
		t.Fatal(err)
	}
	out, err := apply(doc)
	if err != nil {
		t.Fatalf("the patch does not apply to the object it was built for: %v", err)
	}
	obj := &unstructured.Unstructured{}
	if err := json.Unmarshal(out, &obj.Object); err != nil {
		t.Fatal(err)
	}
	gvk := old.GroupVersionKind()
	err = h.Validate(context.Background(), vapeval.Request{
		Operation: admission.Update, Kind: gvk, Resource: resourceOf(t, gvk), Namespace: old.GetNamespace(), Name: old.GetName(),
		Object: obj, OldObject: old, User: &user.DefaultInfo{Name: hostUser},
	})
	if err != nil {
		t.Errorf("denied: %v\nold: %s\nnew: %s", err, doc, out)
	}
}

func resourceOf(t *testing.T, gvk schema.GroupVersionKind) schema.GroupVersionResource {
	t.Helper()
	for _, r := range vapeval.Resources {
		if r.GVK == gvk {
			return r.GVR()
		}
	}
	t.Fatalf("no resource for %v", gvk)
	return schema.GroupVersionResource{}
}

func TestFencePoliciesAreAdmitted(t *testing.T) {
	tests := []struct {
		name   string
		params vapeval.CaseParams
		in     fence.PolicyInput
	}{
		{"claim owner with exact names and a subdomain entry", vapeval.CaseParams{}, fence.PolicyInput{
			Owner: fence.PolicyOwner{Kind: fence.OwnerKindSandboxClaim, Name: "claim-a", UID: "7c9e6679-7425-40de-944b-e07fc1f90ae7"}, Namespace: "sbx",
			Hosts: []string{"registry.npmjs.org", "example.com", ".example.com"}}},
		{"sandbox owner, mixed case and duplicates", vapeval.CaseParams{}, fence.PolicyInput{
			Owner: fence.PolicyOwner{Kind: fence.OwnerKindSandbox, Name: "ws-1", UID: "0b5f3c1e-2d4a-4f6b-8c9d-1e2f3a4b5c6d"}, Namespace: "sbx-2",
			Hosts: []string{"Registry.NPMjs.org", "registry.npmjs.org", ".pypi.org", "pypi.org", "files.pythonhosted.org", "a-b.c0.io"}}},
		{"longest owner name and a 253-character host", vapeval.CaseParams{}, fence.PolicyInput{
			Owner: fence.PolicyOwner{Kind: fence.OwnerKindSandboxClaim, Name: "c23456789012345678901234567890123456789012345678901234567890123", UID: "u1"}, Namespace: "sbx",
			Hosts: []string{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb.ccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc.ddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"}}},
		{"custom label key", vapeval.CaseParams{Spec: map[string]any{
			"hosts": []any{map[string]any{"username": hostUser, "namespaces": []any{"sbx"}}}, "perSandboxLabelKey": "example.com/egress"}},
			fence.PolicyInput{Owner: fence.PolicyOwner{Kind: fence.OwnerKindSandboxClaim, Name: "claim-b", UID: "u2"}, Namespace: "sbx", LabelKey: "example.com/egress", Hosts: []string{"example.org"}}},
	}
	s := suite(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj, err := fence.BuildPerSandboxPolicy(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			h := harness(t, s, tt.params)
			req := vapeval.Request{Operation: admission.Create, Kind: cnpGVK, Resource: resourceOf(t, cnpGVK),
				Namespace: tt.in.Namespace, Name: obj.GetName(), Object: obj, User: &user.DefaultInfo{Name: hostUser}}
			if err := h.Validate(context.Background(), req); err != nil {
				t.Errorf("CREATE denied: %v", err)
			}
			// The 409 path: a merge PATCH of the same full body over the stored one.
			admitUpdate(t, h, obj, func(doc []byte) ([]byte, error) {
				body, err := json.Marshal(obj.Object)
				if err != nil {
					return nil, err
				}
				return jsonpatch.MergePatch(doc, body)
			})
			del := vapeval.Request{Operation: admission.Delete, Kind: cnpGVK, Resource: resourceOf(t, cnpGVK),
				Namespace: tt.in.Namespace, Name: obj.GetName(), OldObject: obj, User: &user.DefaultInfo{Name: hostUser}}
			if err := h.Validate(context.Background(), del); err != nil {
				t.Errorf("DELETE denied: %v", err)
			}
		})
	}
}
