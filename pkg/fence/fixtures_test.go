package fence

import (
	"bytes"
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// sandboxBuilder makes Sandbox fixtures: makeSandbox("a").RV("1001").Epoch("2").Obj().
type sandboxBuilder struct{ u *unstructured.Unstructured }

func makeSandbox(name string) *sandboxBuilder {
	return &sandboxBuilder{u: &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agents.x-k8s.io/v1beta1",
		"kind":       "Sandbox",
		"metadata":   map[string]any{"name": name, "namespace": "ns"},
		"spec": map[string]any{
			"operatingMode": ModeRunning,
			"podTemplate":   map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "main", "image": "old"}}}},
		},
	}}}
}

func (b *sandboxBuilder) RV(rv string) *sandboxBuilder { b.u.SetResourceVersion(rv); return b }

// Annotation sets one annotation, creating the map.
func (b *sandboxBuilder) Annotation(k, v string) *sandboxBuilder {
	m := b.u.GetAnnotations()
	if m == nil {
		m = map[string]string{}
	}
	m[k] = v
	b.u.SetAnnotations(m)
	return b
}

// EmptyAnnotations gives the object an annotations map without keys.
func (b *sandboxBuilder) EmptyAnnotations() *sandboxBuilder {
	unstructured.SetNestedField(b.u.Object, map[string]any{}, "metadata", "annotations")
	return b
}

func (b *sandboxBuilder) Epoch(v string) *sandboxBuilder {
	return b.Annotation(AnnotationHolderEpoch, v)
}

func (b *sandboxBuilder) Mode(m string) *sandboxBuilder {
	unstructured.SetNestedField(b.u.Object, m, "spec", "operatingMode")
	return b
}

func (b *sandboxBuilder) Obj() *unstructured.Unstructured { return b.u.DeepCopy() }

// compact removes the layout whitespace of a contract example.
func compact(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		t.Fatalf("compact %s: %v", s, err)
	}
	return b.String()
}

// The contract's first two fenced-write examples, verbatim (layout whitespace included).
const (
	specSteadyStateSuspend = `[{"op":"test","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"2"},
 {"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"2"},
 {"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1operating-mode-changed-at","value":"2026-08-01T09:00:00.000Z"},
 {"op":"add","path":"/spec/operatingMode","value":"Suspended"}]`
	specMigration = `[{"op":"test","path":"/metadata/resourceVersion","value":"1001"},
 {"op":"add","path":"/metadata/annotations","value":{"sandbox.namzu.ai/holder-epoch":"3","sandbox.namzu.ai/operating-mode-changed-at":"2026-08-01T09:00:00.000Z"}},
 {"op":"add","path":"/spec/operatingMode","value":"Suspended"}]`
)
