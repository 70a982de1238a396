package policies_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sandbox-fence/sandbox-fence/internal/testing/epochs"
	"github.com/sandbox-fence/sandbox-fence/internal/vapeval"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// createWithEpoch is a bound host's CREATE of a Sandbox carrying raw as its
// holder epoch: the write whose verdict is the grammar alone (contract §3.6
// rule 1), since nothing is stored yet to compare with.
func createWithEpoch(raw string) vapeval.CaseInput {
	return vapeval.CaseInput{
		Operation: "CREATE",
		User:      "system:serviceaccount:sbx:sandbox-host",
		Object: map[string]any{
			"apiVersion": "agents.x-k8s.io/v1beta1",
			"kind":       "Sandbox",
			"metadata": map[string]any{
				"name": "ws-1", "namespace": "sbx", "resourceVersion": "1001",
				"annotations": map[string]any{fence.AnnotationHolderEpoch: raw},
			},
			"spec": map[string]any{"operatingMode": "Running", "podTemplate": map[string]any{"spec": map[string]any{
				"containers": []any{map[string]any{"name": "main", "image": "namzu/agent:1"}},
			}}},
		},
	}
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
	hs := newHarnesses(t)
	for _, e := range corpus {
		c := epochCase(e)
		t.Run(e.Why, func(t *testing.T) {
			v, err := hs.forParams(c.Params).Run(context.Background(), c.Request)
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

// FuzzHolderEpochGrammar is the differential check of the two grammars:
// the holder-epoch policy's CEL (through the API server's own plugin) must
// admit exactly the strings fence.ParseEpoch accepts. Seeded with the
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
	h := newHarnesses(f).forParams(vapeval.CaseParams{})
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
	})
}
