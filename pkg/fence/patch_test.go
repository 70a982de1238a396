package fence

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

const changedAt = "2026-08-01T09:00:00.000Z"

var ignoreDetail = cmpopts.IgnoreFields(field.Error{}, "Detail")

func TestBuildHolderEpochPatch(t *testing.T) {
	template := map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"image": "new", "name": "main"}}}}
	hash := Annotation{AnnotationPodTemplateHash, "sha256:83ff99a5673c470fbc66985bf98cf2f31440e270490233b4dea493daa38a6e03"}
	suspended := Operation{OpTest, "/spec/operatingMode", ModeSuspended}
	withEpoch := func(raw string) Reading {
		return ReadHolderEpoch(makeSandbox("a").RV("1001").Epoch(raw).Obj())
	}
	mapNoKey := ReadHolderEpoch(makeSandbox("a").RV("1001").Annotation("other", "x").Obj())
	noMap := ReadHolderEpoch(makeSandbox("a").RV("1001").Obj())
	tests := []struct {
		name     string
		in       PatchInput
		want     string
		wantErrs field.ErrorList
	}{
		{
			name: "a steady-state fenced suspend is the contract's first example",
			in:   PatchInput{Read: withEpoch("2"), Epoch: new(uint64(2)), Mode: ModeSuspended, ChangedAt: changedAt},
			want: specSteadyStateSuspend,
		},
		{
			name: "a migration onto an object without annotations is the contract's second example",
			in:   PatchInput{Read: noMap, Epoch: new(uint64(3)), Mode: ModeSuspended, ChangedAt: changedAt},
			want: specMigration,
		},
		{
			name: "a fenced refresh tests epoch and mode, then writes epoch, changed-at, hash, template and mode",
			in: PatchInput{Read: withEpoch("4"), Epoch: new(uint64(4)), Mode: ModeRunning, ChangedAt: changedAt,
				ExtraAnnotations: []Annotation{hash}, PodTemplate: template, ExtraTests: []Operation{suspended}},
			want: `[{"op":"test","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"4"},
 {"op":"test","path":"/spec/operatingMode","value":"Suspended"},
 {"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"4"},
 {"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1operating-mode-changed-at","value":"2026-08-01T09:00:00.000Z"},
 {"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1pod-template-hash","value":"sha256:83ff99a5673c470fbc66985bf98cf2f31440e270490233b4dea493daa38a6e03"},
 {"op":"add","path":"/spec/podTemplate","value":{"spec":{"containers":[{"image":"new","name":"main"}]}}},
 {"op":"add","path":"/spec/operatingMode","value":"Running"}]`,
		},
		{
			name: "a resume raises the epoch from the exact stored string",
			in:   PatchInput{Read: withEpoch("2"), Epoch: new(uint64(5)), Mode: ModeRunning, ChangedAt: changedAt},
			want: `[{"op":"test","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"2"},
 {"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"5"},
 {"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1operating-mode-changed-at","value":"2026-08-01T09:00:00.000Z"},
 {"op":"add","path":"/spec/operatingMode","value":"Running"}]`,
		},
		{
			name: "a stamp only tests and adds the epoch, with no mode and no changed-at",
			in:   PatchInput{Read: withEpoch("2"), Epoch: new(uint64(3))},
			want: `[{"op":"test","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"2"},
 {"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"3"}]`,
		},
		{
			name: "a stamp onto a map without the key falls back to the resourceVersion and adds per key",
			in:   PatchInput{Read: mapNoKey, Epoch: new(uint64(1))},
			want: `[{"op":"test","path":"/metadata/resourceVersion","value":"1001"},
 {"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"1"}]`,
		},
		{
			name: "a stamp onto an object without a map adds the whole map",
			in:   PatchInput{Read: noMap, Epoch: new(uint64(0))},
			want: `[{"op":"test","path":"/metadata/resourceVersion","value":"1001"},
 {"op":"add","path":"/metadata/annotations","value":{"sandbox.namzu.ai/holder-epoch":"0"}}]`,
		},
		{
			name: "a fenced refresh without a map puts every key in one whole-map add, in fixed order",
			in: PatchInput{Read: noMap, Epoch: new(uint64(4)), Mode: ModeRunning, ChangedAt: changedAt,
				ExtraAnnotations: []Annotation{hash}, PodTemplate: template, ExtraTests: []Operation{suspended}},
			want: `[{"op":"test","path":"/metadata/resourceVersion","value":"1001"},
 {"op":"test","path":"/spec/operatingMode","value":"Suspended"},
 {"op":"add","path":"/metadata/annotations","value":{"sandbox.namzu.ai/holder-epoch":"4","sandbox.namzu.ai/operating-mode-changed-at":"2026-08-01T09:00:00.000Z","sandbox.namzu.ai/pod-template-hash":"sha256:83ff99a5673c470fbc66985bf98cf2f31440e270490233b4dea493daa38a6e03"}},
 {"op":"add","path":"/spec/podTemplate","value":{"spec":{"containers":[{"image":"new","name":"main"}]}}},
 {"op":"add","path":"/spec/operatingMode","value":"Running"}]`,
		},
		{
			name: "a fenced write onto a malformed value tests that exact value (the server decides)",
			in:   PatchInput{Read: withEpoch("007"), Epoch: new(uint64(8))},
			want: `[{"op":"test","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"007"},
 {"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"8"}]`,
		},
		{
			name: "an unfenced refresh keeps its caller's test and has no epoch",
			in: PatchInput{Read: mapNoKey, ExtraAnnotations: []Annotation{hash}, PodTemplate: template,
				ExtraTests: []Operation{suspended}},
			want: `[{"op":"test","path":"/spec/operatingMode","value":"Suspended"},
 {"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1pod-template-hash","value":"sha256:83ff99a5673c470fbc66985bf98cf2f31440e270490233b4dea493daa38a6e03"},
 {"op":"add","path":"/spec/podTemplate","value":{"spec":{"containers":[{"image":"new","name":"main"}]}}}]`,
		},
		{
			name: "an unfenced refresh onto no map appends the resourceVersion test after the caller's",
			in: PatchInput{Read: noMap, ExtraAnnotations: []Annotation{hash}, PodTemplate: template,
				ExtraTests: []Operation{suspended}},
			want: `[{"op":"test","path":"/spec/operatingMode","value":"Suspended"},
 {"op":"test","path":"/metadata/resourceVersion","value":"1001"},
 {"op":"add","path":"/metadata/annotations","value":{"sandbox.namzu.ai/pod-template-hash":"sha256:83ff99a5673c470fbc66985bf98cf2f31440e270490233b4dea493daa38a6e03"}},
 {"op":"add","path":"/spec/podTemplate","value":{"spec":{"containers":[{"image":"new","name":"main"}]}}}]`,
		},
		{
			name: "an unfenced whole-map add is conditional even without caller tests",
			in:   PatchInput{Read: noMap, Mode: ModeSuspended, ChangedAt: changedAt},
			want: `[{"op":"test","path":"/metadata/resourceVersion","value":"1001"},
 {"op":"add","path":"/metadata/annotations","value":{"sandbox.namzu.ai/operating-mode-changed-at":"2026-08-01T09:00:00.000Z"}},
 {"op":"add","path":"/spec/operatingMode","value":"Suspended"}]`,
		},
		{
			name: "annotation keys are pointer-escaped, ~ before /",
			in:   PatchInput{Read: withEpoch("1"), Epoch: new(uint64(1)), ExtraAnnotations: []Annotation{{"a~/b", "<&>"}}},
			want: `[{"op":"test","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"1"},
 {"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"1"},
 {"op":"add","path":"/metadata/annotations/a~0~1b","value":"<&>"}]`,
		},
		{
			name:     "a fenced write whose read saw neither annotation nor resourceVersion is refused",
			in:       PatchInput{Read: Reading{}, Epoch: new(uint64(1))},
			wantErrs: field.ErrorList{field.Required(field.NewPath("read", "resourceVersion"), "")},
		},
		{
			name:     "an unfenced write with no test at all is refused",
			in:       PatchInput{Read: mapNoKey, Mode: ModeSuspended, ChangedAt: changedAt},
			wantErrs: field.ErrorList{field.Required(field.NewPath("extraTests"), "")},
		},
		{
			name:     "an unfenced whole-map add without a resourceVersion is refused",
			in:       PatchInput{Read: Reading{}, Mode: ModeSuspended, ChangedAt: changedAt},
			wantErrs: field.ErrorList{field.Required(field.NewPath("read", "resourceVersion"), "")},
		},
		{
			name:     "an epoch above 2^53-1 is refused",
			in:       PatchInput{Read: withEpoch("1"), Epoch: new(MaxEpoch + 1)},
			wantErrs: field.ErrorList{field.Invalid(field.NewPath("epoch"), MaxEpoch+1, "")},
		},
		{
			name:     "a mode other than Running or Suspended is refused",
			in:       PatchInput{Read: withEpoch("1"), Epoch: new(uint64(1)), Mode: "Paused", ChangedAt: changedAt},
			wantErrs: field.ErrorList{field.NotSupported[string](field.NewPath("mode"), "Paused", nil)},
		},
		{
			name:     "a mode change without changed-at is refused",
			in:       PatchInput{Read: withEpoch("1"), Epoch: new(uint64(1)), Mode: ModeRunning},
			wantErrs: field.ErrorList{field.Invalid(field.NewPath("changedAt"), "", "")},
		},
		{
			name:     "a changed-at that is not UTC with milliseconds is refused",
			in:       PatchInput{Read: withEpoch("1"), Epoch: new(uint64(1)), Mode: ModeRunning, ChangedAt: "2026-08-01T11:00:00+02:00"},
			wantErrs: field.ErrorList{field.Invalid(field.NewPath("changedAt"), "2026-08-01T11:00:00+02:00", "")},
		},
		{
			name:     "changed-at without a mode change is refused",
			in:       PatchInput{Read: withEpoch("1"), Epoch: new(uint64(1)), ChangedAt: changedAt},
			wantErrs: field.ErrorList{field.Forbidden(field.NewPath("changedAt"), "")},
		},
		{
			name: "extra annotations may not smuggle the epoch, nor repeat a key",
			in: PatchInput{Read: withEpoch("1"), Epoch: new(uint64(1)),
				ExtraAnnotations: []Annotation{{AnnotationHolderEpoch, "9"}, hash, hash}},
			wantErrs: field.ErrorList{
				field.Forbidden(field.NewPath("extraAnnotations").Index(0).Child("key"), ""),
				field.Duplicate(field.NewPath("extraAnnotations").Index(2).Child("key"), hash.Key),
			},
		},
		{
			name: "extra tests must be test operations",
			in: PatchInput{Read: withEpoch("1"), Epoch: new(uint64(1)),
				ExtraTests: []Operation{{"remove", "/spec/operatingMode", nil}}},
			wantErrs: field.ErrorList{field.NotSupported[string](field.NewPath("extraTests").Index(0).Child("op"), "remove", nil)},
		},
		{
			name:     "an unfenced patch of tests alone changes nothing and is refused",
			in:       PatchInput{Read: mapNoKey, ExtraTests: []Operation{suspended}},
			wantErrs: field.ErrorList{field.Required(field.NewPath("mode"), "")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ops, errs := buildHolderEpochPatch(tt.in)
			if diff := cmp.Diff(tt.wantErrs, errs, ignoreDetail, cmpopts.IgnoreFields(field.Error{}, "BadValue")); diff != "" {
				t.Fatalf("errors (-want +got):\n%s", diff)
			}
			if tt.want == "" {
				return
			}
			body, err := MarshalPatch(ops)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(compact(t, tt.want), string(body)); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuildHolderEpochPatchReturnsAnAggregate(t *testing.T) {
	if _, err := BuildHolderEpochPatch(PatchInput{Epoch: new(uint64(1))}); err == nil {
		t.Fatal("an unconditional fenced write was built")
	}
}

func TestBuildMergePatch(t *testing.T) {
	tests := []struct {
		name     string
		in       PatchInput
		want     string
		wantErrs field.ErrorList
	}{
		{
			name: "an unfenced suspend is the contract's merge patch",
			in:   PatchInput{Mode: ModeSuspended, ChangedAt: changedAt},
			want: `{"metadata":{"annotations":{"sandbox.namzu.ai/operating-mode-changed-at":"2026-08-01T09:00:00.000Z"}},"spec":{"operatingMode":"Suspended"}}`,
		},
		{
			name: "an unfenced resume sets Running",
			in:   PatchInput{Mode: ModeRunning, ChangedAt: changedAt},
			want: `{"metadata":{"annotations":{"sandbox.namzu.ai/operating-mode-changed-at":"2026-08-01T09:00:00.000Z"}},"spec":{"operatingMode":"Running"}}`,
		},
		{
			name:     "an epoch makes it a fenced write, which is never a merge patch",
			in:       PatchInput{Epoch: new(uint64(1)), Mode: ModeRunning, ChangedAt: changedAt},
			wantErrs: field.ErrorList{field.Forbidden(field.NewPath("epoch"), "")},
		},
		{
			name: "a pod template and tests cannot travel in a merge patch",
			in:   PatchInput{PodTemplate: map[string]any{}, ExtraTests: []Operation{{OpTest, "/spec/operatingMode", ModeSuspended}}},
			wantErrs: field.ErrorList{
				field.Forbidden(field.NewPath("podTemplate"), ""),
				field.Forbidden(field.NewPath("extraTests"), ""),
				field.Required(field.NewPath("mode"), ""),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, errs := buildMergePatch(tt.in)
			if diff := cmp.Diff(tt.wantErrs, errs, ignoreDetail, cmpopts.IgnoreFields(field.Error{}, "BadValue")); diff != "" {
				t.Fatalf("errors (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, string(body)); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEscapePointerSegment(t *testing.T) {
	tests := map[string]string{
		"plain": "plain", "a/b": "a~1b", "a~b": "a~0b", "~1": "~01", "/~": "~1~0", "": "",
	}
	for in, want := range tests {
		if got := EscapePointerSegment(in); got != want {
			t.Errorf("EscapePointerSegment(%q) = %q, want %q", in, got, want)
		}
	}
	if got, want := AnnotationPointer(AnnotationHolderEpoch), "/metadata/annotations/sandbox.namzu.ai~1holder-epoch"; got != want {
		t.Errorf("AnnotationPointer = %q, want %q", got, want)
	}
}

func TestOperationMarshalsValueEvenWhenNil(t *testing.T) {
	body, err := MarshalPatch([]Operation{{OpTest, "/a", nil}, {"remove", "/b", nil}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `[{"op":"test","path":"/a","value":null},{"op":"remove","path":"/b"}]`; string(body) != want {
		t.Errorf("got %s, want %s", body, want)
	}
}
