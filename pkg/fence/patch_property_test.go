package fence

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// randomWrite draws an object in one of the four reading shapes and a write
// that is buildable from its Reading.
func randomWrite(r *rand.Rand) (*unstructured.Unstructured, PatchInput) {
	b := makeSandbox("a").RV(fmt.Sprint(r.IntN(5000) + 1))
	switch r.IntN(4) {
	case 0: // well-formed
		b.Epoch(FormatEpoch(r.Uint64N(10))).Annotation("keep", "me")
	case 1: // malformed
		b.Epoch([]string{"01", "-1", "", "x", "9007199254740992"}[r.IntN(5)])
	case 2: // map without key
		b.Annotation("keep", "me")
	case 3: // no map
	}
	if r.IntN(2) == 0 {
		b.Mode(ModeSuspended)
	}
	obj := b.Obj()
	in := PatchInput{Read: ReadHolderEpoch(obj)}
	if r.IntN(4) != 0 {
		in.Epoch = new(in.Read.Epoch + r.Uint64N(3))
	}
	if r.IntN(3) != 0 {
		in.Mode, in.ChangedAt = []string{ModeRunning, ModeSuspended}[r.IntN(2)], changedAt
	}
	if r.IntN(3) == 0 {
		in.ExtraAnnotations = []Annotation{{AnnotationPodTemplateHash, fmt.Sprintf("sha256:%064x", r.Uint64())}}
		in.PodTemplate = map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "main", "image": fmt.Sprint("img:", r.IntN(9))}}}}
		if mode, _, _ := unstructured.NestedString(obj.Object, "spec", "operatingMode"); mode == ModeSuspended {
			in.ExtraTests = []Operation{{OpTest, "/spec/operatingMode", ModeSuspended}}
		}
	}
	if in.Epoch == nil && in.Mode == "" && in.PodTemplate == nil {
		in.Mode, in.ChangedAt = ModeRunning, changedAt // an unfenced write must change something
	}
	if in.Epoch == nil && len(in.ExtraTests) == 0 && in.Read.HasAnnotations {
		in.ExtraTests = []Operation{{OpTest, "/spec/operatingMode", mustMode(obj)}}
	}
	return obj, in
}

func mustMode(obj *unstructured.Unstructured) string {
	m, _, _ := unstructured.NestedString(obj.Object, "spec", "operatingMode")
	return m
}

// intended computes the object a write means, independently of the patch.
func intended(obj *unstructured.Unstructured, in PatchInput) map[string]any {
	want := obj.DeepCopy()
	annotations := want.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	for _, a := range in.annotations() {
		annotations[a.Key] = a.Value
	}
	if len(annotations) > 0 || obj.GetAnnotations() != nil {
		want.SetAnnotations(annotations)
	}
	if in.PodTemplate != nil {
		want.Object["spec"].(map[string]any)["podTemplate"] = in.PodTemplate
	}
	if in.Mode != "" {
		want.Object["spec"].(map[string]any)["operatingMode"] = in.Mode
	}
	return roundTrip(want.Object)
}

func roundTrip(v any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

func applyPatch(t *testing.T, obj *unstructured.Unstructured, ops []Operation) (map[string]any, error) {
	t.Helper()
	body, err := MarshalPatch(ops)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := jsonpatch.DecodePatch(body)
	if err != nil {
		t.Fatalf("patch %s does not decode: %v", body, err)
	}
	doc, err := json.Marshal(obj.Object)
	if err != nil {
		t.Fatal(err)
	}
	out, err := patch.Apply(doc)
	if err != nil {
		return nil, err
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	return got, nil
}

// TestPatchesApplyAndFence applies every emitted patch to the object it was
// built from (it must yield the intended object) and to the same object after
// a concurrent change of what the epoch clause tests (it must fail): the
// property that makes the patch a fence.
func TestPatchesApplyAndFence(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	shapes := map[string]int{}
	for i := range 2000 {
		obj, in := randomWrite(r)
		ops, err := BuildHolderEpochPatch(in)
		if err != nil {
			t.Fatalf("case %d: %+v: %v", i, in, err)
		}
		got, err := applyPatch(t, obj, ops)
		if err != nil {
			t.Fatalf("case %d: patch %+v does not apply to the object it was built from: %v", i, ops, err)
		}
		if diff := cmp.Diff(intended(obj, in), got); diff != "" {
			t.Fatalf("case %d: patched object (-want +got):\n%s", i, diff)
		}
		for name, change := range concurrentChanges(obj, in) {
			shapes[name]++
			if _, err := applyPatch(t, change, ops); err == nil {
				t.Fatalf("case %d: patch %+v still applies after %s", i, ops, name)
			}
		}
	}
	// A property over draws that never hit a shape proves nothing about it.
	for _, name := range []string{"epoch raised", "epoch removed", "epoch made malformed", "resourceVersion moved", "map added by another writer"} {
		if shapes[name] < 50 {
			t.Errorf("only %d draws exercised %q", shapes[name], name)
		}
	}
}

// concurrentChanges returns the object as another writer could have left it
// between the read and the patch, for each change the patch must notice.
func concurrentChanges(obj *unstructured.Unstructured, in PatchInput) map[string]*unstructured.Unstructured {
	out := map[string]*unstructured.Unstructured{}
	epochClause := in.Epoch != nil && in.Read.State != EpochAbsent
	next := func() *unstructured.Unstructured {
		c := obj.DeepCopy()
		// Every real write moves the resourceVersion; keep it still where the
		// epoch clause guards, so only that clause can make the patch fail.
		if !epochClause {
			c.SetResourceVersion(obj.GetResourceVersion() + "0")
		}
		return c
	}
	switch {
	case epochClause:
		raised := next()
		a := raised.GetAnnotations()
		a[AnnotationHolderEpoch] = FormatEpoch(in.Read.Epoch + 1)
		raised.SetAnnotations(a)
		out["epoch raised"] = raised
		removed := next()
		a = removed.GetAnnotations()
		delete(a, AnnotationHolderEpoch)
		removed.SetAnnotations(a)
		out["epoch removed"] = removed
		if in.Read.State == EpochWellFormed {
			bad := next()
			a = bad.GetAnnotations()
			a[AnnotationHolderEpoch] = "0" + in.Read.Raw
			bad.SetAnnotations(a)
			out["epoch made malformed"] = bad
		}
	case in.Epoch != nil || !in.Read.HasAnnotations && len(in.annotations()) > 0:
		// The fallback shape: only the resourceVersion guards the write.
		out["resourceVersion moved"] = next()
		if !in.Read.HasAnnotations {
			added := next()
			added.SetAnnotations(map[string]string{"other-writer": "x", AnnotationHolderEpoch: "9"})
			out["map added by another writer"] = added
		}
	}
	return out
}
