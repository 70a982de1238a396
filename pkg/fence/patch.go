package fence

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// JSON Patch (RFC 6902) operation names. The host sends only these two: add
// creates or replaces a member, where replace would fail on an absent one.
const (
	OpTest = "test"
	OpAdd  = "add"
)

// ChangedAtLayout is the layout of the operating-mode-changed-at annotation:
// what JavaScript's Date.prototype.toISOString writes, so Go and TypeScript
// hosts stamp the same shape. Format a time.Time in UTC with it.
const ChangedAtLayout = "2006-01-02T15:04:05.000Z07:00"

// FormatChangedAt formats t for the operating-mode-changed-at annotation.
func FormatChangedAt(t time.Time) string { return t.UTC().Format(ChangedAtLayout) }

// Operation is one RFC 6902 operation. It marshals as
// {"op":..,"path":..,"value":..}; value is always present for test and add,
// even when nil (a test against null must say so).
type Operation struct {
	Op    string
	Path  string
	Value any
}

// MarshalJSON writes the members in RFC 6902 order without HTML escaping, so
// the bytes match the host's JSON.stringify.
func (o Operation) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"op":`)
	if err := encodeNoHTML(&b, o.Op); err != nil {
		return nil, err
	}
	b.WriteString(`,"path":`)
	if err := encodeNoHTML(&b, o.Path); err != nil {
		return nil, err
	}
	if o.Op != "remove" {
		b.WriteString(`,"value":`)
		if err := encodeNoHTML(&b, o.Value); err != nil {
			return nil, err
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// MarshalPatch serialises a patch body. Use it rather than json.Marshal,
// which would HTML-escape '<', '>' and '&' inside values.
func MarshalPatch(ops []Operation) ([]byte, error) {
	var b bytes.Buffer
	if err := encodeNoHTML(&b, ops); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func encodeNoHTML(b *bytes.Buffer, v any) error {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	b.Truncate(b.Len() - 1) // Encode appends a newline
	return nil
}

// EscapePointerSegment escapes one JSON Pointer (RFC 6901) reference token:
// "~" to "~0" first, then "/" to "~1". The other order would turn a "/" into
// "~1" and then into "~01".
func EscapePointerSegment(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// AnnotationPointer is the JSON Pointer of one annotation key.
func AnnotationPointer(key string) string {
	return "/metadata/annotations/" + EscapePointerSegment(key)
}

// Annotation is one key/value pair; slices of them keep the wire order the
// host sends.
type Annotation struct {
	Key   string
	Value string
}

// annotationList marshals as a JSON object in slice order (a Go map would be
// sorted, and the host sends holder-epoch, changed-at, then the extra keys).
type annotationList []Annotation

// MarshalJSON writes the members in slice order.
func (l annotationList) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, a := range l {
		if i > 0 {
			b.WriteByte(',')
		}
		if err := encodeNoHTML(&b, a.Key); err != nil {
			return nil, err
		}
		b.WriteByte(':')
		if err := encodeNoHTML(&b, a.Value); err != nil {
			return nil, err
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// PatchInput describes one write to a Sandbox, built from the Reading of ONE
// prior GET. The zero value of every optional field means "leave it alone".
type PatchInput struct {
	// Read is the Reading of the GET the write is based on.
	Read Reading
	// Epoch is the epoch the write carries; nil makes it an unfenced write.
	Epoch *uint64
	// Mode is the operating mode to set (ModeRunning or ModeSuspended); ""
	// leaves it (a stamp, or a refresh that keeps the workspace suspended).
	Mode string
	// ChangedAt is the operating-mode-changed-at value (ChangedAtLayout).
	// Required with Mode, refused without it: the annotation records mode
	// changes only.
	ChangedAt string
	// ExtraAnnotations are written after the backend keys, in this order
	// (the pod-template-hash of a refresh).
	ExtraAnnotations []Annotation
	// PodTemplate, when non-nil, replaces spec.podTemplate as a whole.
	PodTemplate any
	// ExtraTests are the caller's own conditions, sent after the epoch clause
	// (a refresh tests /spec/operatingMode "Suspended").
	ExtraTests []Operation
}

// annotations returns the annotations the write sets, in wire order.
func (in PatchInput) annotations() annotationList {
	var l annotationList
	if in.Epoch != nil {
		l = append(l, Annotation{AnnotationHolderEpoch, FormatEpoch(*in.Epoch)})
	}
	if in.Mode != "" {
		l = append(l, Annotation{AnnotationOperatingModeChangedAt, in.ChangedAt})
	}
	return append(l, in.ExtraAnnotations...)
}

// validate refuses inputs that cannot become a well-formed write.
func (in PatchInput) validate() field.ErrorList {
	var errs field.ErrorList
	if in.Epoch != nil && *in.Epoch > MaxEpoch {
		errs = append(errs, field.Invalid(field.NewPath("epoch"), *in.Epoch, fmt.Sprintf("must be at most %d (contract §3.1)", MaxEpoch)))
	}
	switch in.Mode {
	case "":
		if in.ChangedAt != "" {
			errs = append(errs, field.Forbidden(field.NewPath("changedAt"), "operating-mode-changed-at is written only by a write that sets mode"))
		}
	case ModeRunning, ModeSuspended:
		if t, err := time.Parse(ChangedAtLayout, in.ChangedAt); err != nil || FormatChangedAt(t) != in.ChangedAt {
			errs = append(errs, field.Invalid(field.NewPath("changedAt"), in.ChangedAt, "must be UTC RFC 3339 with milliseconds, e.g. 2026-08-01T09:00:00.000Z (use FormatChangedAt)"))
		}
	default:
		errs = append(errs, field.NotSupported(field.NewPath("mode"), in.Mode, []string{ModeRunning, ModeSuspended}))
	}
	seen := map[string]bool{AnnotationHolderEpoch: true, AnnotationOperatingModeChangedAt: true}
	for i, a := range in.ExtraAnnotations {
		p := field.NewPath("extraAnnotations").Index(i).Child("key")
		switch {
		case a.Key == AnnotationHolderEpoch || a.Key == AnnotationOperatingModeChangedAt:
			errs = append(errs, field.Forbidden(p, a.Key+" is written from epoch and mode, never as an extra annotation"))
		case a.Key == "":
			errs = append(errs, field.Required(p, "an annotation key"))
		case seen[a.Key]:
			errs = append(errs, field.Duplicate(p, a.Key))
		}
		seen[a.Key] = true
	}
	for i, t := range in.ExtraTests {
		if t.Op != OpTest {
			errs = append(errs, field.NotSupported(field.NewPath("extraTests").Index(i).Child("op"), t.Op, []string{OpTest}))
		}
	}
	return errs
}

// BuildHolderEpochPatch builds the JSON Patch of contract §3.2: every test first
// (the epoch clause, the caller's tests, then the resourceVersion test an
// unfenced whole-map add needs), then the annotations in fixed key order, then
// spec.podTemplate, then spec.operatingMode.
//
// It refuses to build an unconditional write: a fenced write whose read saw
// neither the annotation nor a resourceVersion, or an unfenced write with no
// test at all (send unfenced writes as BuildMergePatch bodies instead).
//
// It does not gate on the stored epoch: call Reading.Allows first, as Client
// does. Keeping the gate out lets policy tests build the decreasing writes the
// server must deny.
func BuildHolderEpochPatch(in PatchInput) ([]Operation, error) {
	return aggregate(buildHolderEpochPatch(in))
}

// aggregate turns a builder's field errors into one error for the caller,
// keeping each error's path (hosts[2], extraAnnotations[0].key, ...).
func aggregate[T any](v T, errs field.ErrorList) (T, error) {
	if len(errs) > 0 {
		var zero T
		return zero, errs.ToAggregate()
	}
	return v, nil
}

func buildHolderEpochPatch(in PatchInput) ([]Operation, field.ErrorList) {
	errs := in.validate()
	fenced := in.Epoch != nil
	annotations := in.annotations()
	var ops []Operation
	if fenced {
		// The epoch clause makes the write conditional on the exact state the
		// gate read approved; without it a concurrent raise would be overwritten.
		switch {
		case in.Read.State != EpochAbsent:
			ops = append(ops, Operation{OpTest, AnnotationPointer(AnnotationHolderEpoch), in.Read.Raw})
		case in.Read.ResourceVersion != "":
			ops = append(ops, Operation{OpTest, "/metadata/resourceVersion", in.Read.ResourceVersion})
		default:
			errs = append(errs, field.Required(field.NewPath("read", "resourceVersion"), "a fenced write on an object without the epoch annotation is conditional on the resourceVersion of its read; re-read the object"))
		}
	}
	ops = append(ops, in.ExtraTests...)
	if !fenced && !in.Read.HasAnnotations && len(annotations) > 0 {
		// A whole-map add replaces the map, erasing annotations a concurrent
		// writer added since the read.
		if in.Read.ResourceVersion == "" {
			errs = append(errs, field.Required(field.NewPath("read", "resourceVersion"), "adding the annotations map as a whole must be conditional on the resourceVersion of the read; re-read the object"))
		}
		ops = append(ops, Operation{OpTest, "/metadata/resourceVersion", in.Read.ResourceVersion})
	}
	if !fenced && len(ops) == 0 {
		errs = append(errs, field.Required(field.NewPath("extraTests"), "an unfenced JSON Patch without any test is unconditional; send it as a merge patch (BuildMergePatch) or add a test"))
	}
	mutations := len(ops)
	switch {
	case len(annotations) == 0:
	case in.Read.HasAnnotations:
		for _, a := range annotations {
			ops = append(ops, Operation{OpAdd, AnnotationPointer(a.Key), a.Value})
		}
	default:
		ops = append(ops, Operation{OpAdd, "/metadata/annotations", annotations})
	}
	if in.PodTemplate != nil {
		ops = append(ops, Operation{OpAdd, "/spec/podTemplate", in.PodTemplate})
	}
	if in.Mode != "" {
		ops = append(ops, Operation{OpAdd, "/spec/operatingMode", in.Mode})
	}
	if len(ops) == mutations {
		errs = append(errs, field.Required(field.NewPath("mode"), "the write changes nothing; set an epoch, a mode, annotations or a pod template"))
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return ops, nil
}

// BuildMergePatch builds the body of an unfenced write (contract §3.3): a JSON
// merge patch of the changed-at and extra annotations and the mode, exactly
// what a host without an epoch always sent. A pod template is refused: a merge
// patch would keep map entries the new template dropped.
func BuildMergePatch(in PatchInput) ([]byte, error) {
	return aggregate(buildMergePatch(in))
}

func buildMergePatch(in PatchInput) ([]byte, field.ErrorList) {
	errs := in.validate()
	if in.Epoch != nil {
		errs = append(errs, field.Forbidden(field.NewPath("epoch"), "a fenced write is a JSON Patch; use BuildHolderEpochPatch"))
	}
	if in.PodTemplate != nil {
		errs = append(errs, field.Forbidden(field.NewPath("podTemplate"), "a merge patch would keep entries the new template dropped; use BuildHolderEpochPatch with a test"))
	}
	if len(in.ExtraTests) > 0 {
		errs = append(errs, field.Forbidden(field.NewPath("extraTests"), "a merge patch cannot carry tests; use BuildHolderEpochPatch"))
	}
	type metadata struct {
		Annotations annotationList `json:"annotations"`
	}
	type spec struct {
		OperatingMode string `json:"operatingMode"`
	}
	var body struct {
		Metadata *metadata `json:"metadata,omitempty"`
		Spec     *spec     `json:"spec,omitempty"`
	}
	if a := in.annotations(); len(a) > 0 {
		body.Metadata = &metadata{a}
	}
	if in.Mode != "" {
		body.Spec = &spec{in.Mode}
	}
	if body.Metadata == nil && body.Spec == nil {
		errs = append(errs, field.Required(field.NewPath("mode"), "the write changes nothing; set a mode or annotations"))
	}
	if len(errs) > 0 {
		return nil, errs
	}
	var b bytes.Buffer
	if err := encodeNoHTML(&b, body); err != nil {
		return nil, field.ErrorList{field.InternalError(nil, err)}
	}
	return b.Bytes(), nil
}
