package policies_test

import (
	"context"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sandbox-fence/sandbox-fence/internal/testing/epochs"
	"github.com/sandbox-fence/sandbox-fence/internal/vapeval"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// sandboxWithEpoch is a Sandbox in sbx carrying raw as its holder epoch.
func sandboxWithEpoch(raw string) map[string]any {
	return map[string]any{
		"apiVersion": "agents.x-k8s.io/v1beta1",
		"kind":       "Sandbox",
		"metadata": map[string]any{
			"name": "ws-1", "namespace": "sbx", "resourceVersion": "1001",
			"annotations": map[string]any{fence.AnnotationHolderEpoch: raw},
		},
		"spec": map[string]any{"operatingMode": "Running", "podTemplate": map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": "main", "image": "namzu/agent:1"}},
		}}},
	}
}

// createWithEpoch is a bound host's CREATE of a Sandbox carrying raw as its
// holder epoch: the write whose verdict is the grammar alone, since nothing
// is stored yet to compare with.
func createWithEpoch(raw string) vapeval.CaseInput {
	return vapeval.CaseInput{Operation: "CREATE", User: hostUser, Object: sandboxWithEpoch(raw)}
}

// removeEpoch is a bound host's UPDATE that removes a stored holder epoch
// raw: a write that reads the stored value (a removal is admitted only
// from 0, and a malformed value only break-glass may change).
func removeEpoch(raw string) vapeval.CaseInput {
	return vapeval.CaseInput{Operation: "UPDATE", User: hostUser, OldObject: sandboxWithEpoch(raw), JSONPatch: []any{
		map[string]any{"op": "remove", "path": "/metadata/annotations/" + strings.ReplaceAll(fence.AnnotationHolderEpoch, "/", "~1")},
	}}
}

// deleteWithEpoch is a bound host's unconditional DELETE of a Sandbox whose
// stored holder epoch is raw: strict delete reads that epoch to decide
// whether the DELETE needs a precondition.
func deleteWithEpoch(raw string) vapeval.CaseInput {
	return vapeval.CaseInput{Operation: "DELETE", User: hostUser, OldObject: sandboxWithEpoch(raw)}
}

// epochCase is the case the corpus line e implies: admitted when well
// formed, otherwise denied by the holder-epoch policy as malformed.
func epochCase(e epochs.Epoch) *vapeval.Case {
	c := &vapeval.Case{Description: "a CREATE carrying " + e.Name(), Request: createWithEpoch(e.Raw), Expect: vapeval.Expect{Allowed: true}}
	if e.Malformed {
		c.Expect = vapeval.Expect{Code: 422, Policy: "sandbox-fence-holder-epoch",
			Messages: []string{"holder-epoch: metadata.annotations[" + fence.AnnotationHolderEpoch + "]", "is malformed"}}
	}
	return c
}

// TestHolderEpochGrammarCorpus generates one holder-epoch case per line of
// the committed corpus (pkg/fence/testdata/epochs.jsonl), the lines
// pkg/fence's TestParseEpoch reads, so the policy and the Go parser are held
// to the same examples.
func TestHolderEpochGrammarCorpus(t *testing.T) {
	corpus, err := epochs.Load()
	if err != nil {
		t.Fatal(err)
	}
	s := suite(t)
	for _, e := range corpus {
		c := epochCase(e)
		t.Run(e.Why, func(t *testing.T) {
			v, err := s.Run(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range c.Problems(v) {
				t.Errorf("%s: %s", c.Description, p)
			}
		})
	}
	t.Logf("%d generated cases", len(corpus))
}

// FuzzHolderEpochGrammar is the differential check of the grammars: the
// holder-epoch policy's CEL (through the API server's own plugin) must
// admit exactly the strings fence.ParseEpoch accepts, and every CEL copy of
// the grammar (epochCopies) must read them alike. Seeded with the
// corpus. An annotation value reaches the API server as JSON text, whose
// decoder replaces each invalid UTF-8 byte sequence with U+FFFD, so an
// invalid input is checked as the string the server would hold.
func FuzzHolderEpochGrammar(f *testing.F) {
	corpus, err := epochs.Load()
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range corpus {
		f.Add(e.Raw)
	}
	h := harness(f, suite(f), vapeval.CaseParams{})
	probes := startEpochProbes(f)
	f.Fuzz(func(t *testing.T, raw string) {
		raw = strings.ToValidUTF8(raw, "\uFFFD")
		v, err := h.Run(context.Background(), createWithEpoch(raw))
		if err != nil {
			t.Fatal(err)
		}
		_, perr := fence.ParseEpoch(raw)
		switch {
		case perr == nil && !v.Allowed:
			t.Fatalf("ParseEpoch accepts %q, the policy denies it: %s", raw, v.Message)
		case perr != nil && v.Allowed:
			t.Fatalf("ParseEpoch refuses %q (%v), the policy admits it", raw, perr)
		case perr != nil && v.Code != 422:
			t.Fatalf("%q denied with %d, want 422: %s", raw, v.Code, v.Message)
		}
		for _, p := range probes {
			if well := p.wellFormed(t, raw); well != (perr == nil) {
				t.Fatalf("%s %s reads %q as well formed %v, ParseEpoch %v", p.dir, p.name, raw, well, perr == nil)
			}
		}
	})
}

// epochGrammar is the piece every CEL copy of the holder-epoch grammar
// (canonical decimal, at most MaxEpoch) holds; the digit bound keeps int()
// from overflowing before the MaxEpoch comparison.
const epochGrammar = `.matches('^(0|[1-9][0-9]{0,15})$')`

// epochCopy is one place a policy writes the holder-epoch grammar in CEL.
// CEL has no user-defined functions and each policy reads the epoch of its
// own request, so the grammar is written once per policy that reads an
// epoch, three times (holder-epoch reads the new and the stored value
// through one variable, well); each reading is held to
// fence.ParseEpoch by a probe: its policy as shipped (match conditions and
// variables) with the validations replaced by one that holds, so the
// request is admitted, exactly when the copy reads the epoch as well formed.
type epochCopy struct {
	// dir is the policy's directory under policies/.
	dir string
	// name is the variable or match condition that reads the epoch.
	name string
	// holder is the variable or match condition that writes the grammar,
	// when it is not name itself.
	holder string
	// probe is the one validation. The match condition's copy is probed by
	// false: the condition matches only a malformed stored value, so a
	// request it skips (admitted) is one it read as well formed.
	probe string
	// request carries raw where the copy reads it.
	request func(raw string) vapeval.CaseInput
}

var epochCopies = []epochCopy{
	{dir: "holder-epoch", name: "newWell", holder: "well", probe: "variables.newWell", request: createWithEpoch},
	{dir: "holder-epoch", name: "oldWell", holder: "well", probe: "variables.oldWell", request: removeEpoch},
	{dir: "holder-epoch-repair", name: "changes-malformed-epoch", probe: "false", request: removeEpoch},
	{dir: "strict-delete", name: "epochWell", probe: "variables.epochWell", request: deleteWithEpoch},
}

func (c epochCopy) holderName() string {
	if c.holder != "" {
		return c.holder
	}
	return c.name
}

// probeMessage denies what a probe reads as malformed; any other denial is
// the probe failing (failurePolicy Fail surfaces a CEL error).
const probeMessage = "holder-epoch: probe: the copy reads the holder epoch as malformed"

// epochProbe is an epochCopy's probe, started.
type epochProbe struct {
	epochCopy
	h *vapeval.Harness
}

// wellFormed reports whether the copy reads raw as well formed.
func (p epochProbe) wellFormed(t testing.TB, raw string) bool {
	t.Helper()
	v, err := p.h.Run(context.Background(), p.request(raw))
	if err != nil {
		t.Fatal(err)
	}
	if !v.Allowed && (v.Code != 422 || !strings.Contains(v.Message, probeMessage)) {
		t.Fatalf("%s %s: %q denied by something other than the probe (%d): %s", p.dir, p.name, raw, v.Code, v.Message)
	}
	return v.Allowed
}

// startEpochProbes starts one probe per copy, after checking that each
// named copy still holds the grammar and that the bundle holds no other.
func startEpochProbes(t testing.TB) []epochProbe {
	t.Helper()
	found := 0
	for _, p := range loadBundle(t) {
		for _, e := range policyExpressions(p.Policy) {
			found += strings.Count(e, epochGrammar)
		}
	}
	holders := map[string]bool{}
	for _, c := range epochCopies {
		holders[c.dir+"/"+c.holderName()] = true
	}
	if found != len(holders) {
		t.Fatalf("the policies write the holder-epoch grammar %s %d times, epochCopies probes %d: probe a new copy, and keep an edited one the grammar", epochGrammar, found, len(holders))
	}
	// strict-delete matches only while spec.strictDelete is set.
	params := defaultParams(t)
	if err := unstructured.SetNestedField(params.Object, true, "spec", "strictDelete"); err != nil {
		t.Fatal(err)
	}
	config := caseConfig(t, params, vapeval.CaseParams{Spec: params.Object["spec"].(map[string]any)})
	fail, invalid := admissionregistrationv1.Fail, metav1.StatusReasonInvalid
	var out []epochProbe
	for _, c := range epochCopies {
		p, err := vapeval.LoadPolicyDir(c.dir)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(namedExpression(p.Policy, c.holderName()), epochGrammar); n != 1 {
			t.Fatalf("%s %s holds the holder-epoch grammar %d times, want once", c.dir, c.holderName(), n)
		}
		p.Policy.Spec.Validations = []admissionregistrationv1.Validation{{Expression: c.probe, Message: probeMessage, Reason: &invalid}}
		p.Policy.Spec.AuditAnnotations = nil
		p.Policy.Spec.FailurePolicy = &fail
		h, err := vapeval.Start(context.Background(), vapeval.Env{
			Policies: vapeval.Rendered([]*vapeval.PolicyDir{p}, config), Namespaces: namespaces(t), Resources: vapeval.Resources,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Stop)
		out = append(out, epochProbe{epochCopy: c, h: h})
	}
	return out
}

// policyExpressions are every CEL expression of p.
func policyExpressions(p *admissionregistrationv1.ValidatingAdmissionPolicy) []string {
	var out []string
	for _, m := range p.Spec.MatchConditions {
		out = append(out, m.Expression)
	}
	for _, v := range p.Spec.Variables {
		out = append(out, v.Expression)
	}
	for _, v := range p.Spec.Validations {
		out = append(out, v.Expression, v.MessageExpression)
	}
	for _, a := range p.Spec.AuditAnnotations {
		out = append(out, a.ValueExpression)
	}
	return out
}

// namedExpression is p's variable or match condition called name.
func namedExpression(p *admissionregistrationv1.ValidatingAdmissionPolicy, name string) string {
	for _, m := range p.Spec.MatchConditions {
		if m.Name == name {
			return m.Expression
		}
	}
	for _, v := range p.Spec.Variables {
		if v.Name == name {
			return v.Expression
		}
	}
	return ""
}

// TestEveryHolderEpochGrammarCopyReadsTheCorpus runs every line of the
// committed corpus through each CEL copy of the grammar: each must read as
// well formed exactly the lines fence.ParseEpoch accepts (pkg/fence's
// TestParseEpoch holds the parser to the same lines), so a copy edited in
// one policy, the way repeats drift, fails here.
func TestEveryHolderEpochGrammarCopyReadsTheCorpus(t *testing.T) {
	corpus, err := epochs.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range startEpochProbes(t) {
		t.Run(p.dir+"/"+p.name, func(t *testing.T) {
			for _, e := range corpus {
				if well := p.wellFormed(t, e.Raw); well == e.Malformed {
					t.Errorf("%s: read as well formed %v, want %v", e.Name(), well, !e.Malformed)
				}
			}
		})
	}
}
