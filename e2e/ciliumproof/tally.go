package ciliumproof

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Outcome is what happened to one body.
type Outcome struct {
	Body    Body
	Verdict Verdict
	// ParseErr is Cilium's refusal (Parse, which runs Sanitize), if any.
	ParseErr error
	// Findings are the ways what the pods reach under the body, beside the
	// baseline, leaves the contract (Plan.Check). Not computed for a body
	// both the fence and Cilium refuse.
	Findings []Finding
	// Flows is the number of flows looked up.
	Flows int
}

// Defects are what must never happen: an admitted body Cilium refuses, an
// admitted body under which a pod reaches other than the contract says, a
// denial that is not the fence's 422 Invalid (a 403 reads to a host as
// missing RBAC).
func (o Outcome) Defects() []string {
	var out []string
	if len(o.Body.Mutations) == 0 && !o.Verdict.Allowed {
		out = append(out, "the body pkg/fence writes is denied: "+o.Verdict.Message)
	}
	switch {
	case o.Verdict.Allowed:
		if o.ParseErr != nil {
			out = append(out, "admitted, but Cilium refuses it: "+o.ParseErr.Error())
		}
		for _, f := range o.Findings {
			out = append(out, "admitted, but a pod's reach under it is not the contract's: "+f.String())
		}
	case !strings.HasPrefix(o.Verdict.Rule, "not the fence's"):
		if o.Verdict.Code != 422 || o.Verdict.Reason != "Invalid" {
			out = append(out, fmt.Sprintf("a fence denial must be 422 Invalid, got %d %s", o.Verdict.Code, o.Verdict.Reason))
		}
	}
	return out
}

// OverStrict reports a denied body that Cilium accepts and under which the
// pods reach exactly what the contract says: a candidate for a rule
// stricter than it needs to be.
func (o Outcome) OverStrict() bool {
	return !o.Verdict.Allowed && o.ParseErr == nil && o.Flows > 0 && len(o.Findings) == 0
}

// Prover is what a body is run against: the shipped bundle, ciliumreach and
// the shipped baseline (its path, which ciliumreach reads).
type Prover struct {
	Fence    *Fence
	Reach    *Reach
	Baseline string
	// OverStrict asks for the pods' reach under denied bodies Cilium
	// parses too, for the over-strict report; only admitted bodies can be
	// defects.
	OverStrict bool
}

// Run evaluates one body: the fence's verdict, Cilium's parse, and what the
// pods reach under it (Plan.Check) when the fence admits it, or when
// p.OverStrict and Cilium parses it. A body Cilium refuses is imported by
// no agent, so an admitted one is checked as no per-sandbox policy: its
// sandbox then misses its allowlist.
func Run(ctx context.Context, p *Prover, b Body, rng *rand.Rand) (Outcome, error) {
	v, err := p.Fence.Evaluate(ctx, b)
	if err != nil {
		return Outcome{}, err
	}
	o := Outcome{Body: b, Verdict: v}
	if _, err := Parse(b.Object); err != nil {
		o.ParseErr = err
	}
	if !v.Allowed && (o.ParseErr != nil || !p.OverStrict) {
		return o, nil
	}
	plan := NewPlan(b.Object, b.Subject, p.Baseline, rng)
	ans, err := p.Reach.Ask(plan.Request)
	if err != nil {
		return Outcome{}, err
	}
	o.Flows = len(ans.Verdicts)
	o.Findings = plan.Check(ans)
	if (ans.ParseError == "") != (o.ParseErr == nil) {
		o.Findings = append(o.Findings, Finding{Where: "Cilium's Parse",
			Detail: fmt.Sprintf("built against the e2e module's k8s.io it says %v, built against Cilium's own %q", o.ParseErr, ans.ParseError)})
	}
	return o, nil
}

// RunAll runs every body on all processors. Each body's name sampling draws
// from its own source (seed, index), so the outcomes do not depend on the
// order in which workers pick bodies up.
func RunAll(ctx context.Context, p *Prover, bodies []Body, seed uint64) ([]Outcome, error) {
	out := make([]Outcome, len(bodies))
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, runtime.GOMAXPROCS(0))
	for w := range errs {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(bodies) || ctx.Err() != nil {
					return
				}
				o, err := Run(ctx, p, bodies[i], rand.New(rand.NewPCG(seed, uint64(i))))
				if err != nil {
					errs[w] = err
					return
				}
				out[i] = o
			}
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// Tally counts outcomes.
type Tally struct {
	Bodies, Admitted, Denied int
	// Flows counts the flows looked up, Reached the bodies they were
	// looked up for.
	Flows, Reached                               int
	AdmittedCiliumRejected, DeniedCiliumRejected int
	// DeniedBy counts denials by rule; OverStrictBy the denials under which
	// the pods reach what the contract says, by rule, with one example each.
	DeniedBy      map[string]int
	OverStrictBy  map[string]int
	OverStrictEg  map[string]Outcome
	Defects       []Outcome
	MutationsSeen map[string][2]int // [admitted, denied]
}

// NewTally returns an empty tally.
func NewTally() *Tally {
	return &Tally{DeniedBy: map[string]int{}, OverStrictBy: map[string]int{}, OverStrictEg: map[string]Outcome{},
		MutationsSeen: map[string][2]int{}}
}

// Add counts one outcome.
func (t *Tally) Add(o Outcome) {
	t.Bodies++
	t.Flows += o.Flows
	if o.Flows > 0 {
		t.Reached++
	}
	if o.Verdict.Allowed {
		t.Admitted++
	} else {
		t.Denied++
		t.DeniedBy[o.Verdict.Rule]++
	}
	if o.ParseErr != nil {
		if o.Verdict.Allowed {
			t.AdmittedCiliumRejected++
		} else {
			t.DeniedCiliumRejected++
		}
	}
	if o.OverStrict() {
		t.OverStrictBy[o.Verdict.Rule]++
		if _, ok := t.OverStrictEg[o.Verdict.Rule]; !ok {
			t.OverStrictEg[o.Verdict.Rule] = o
		}
	}
	if len(o.Defects()) > 0 {
		t.Defects = append(t.Defects, o)
	}
	for _, m := range o.Body.Mutations {
		c := t.MutationsSeen[m]
		if o.Verdict.Allowed {
			c[0]++
		} else {
			c[1]++
		}
		t.MutationsSeen[m] = c
	}
}

// Markdown renders the tally as the tables RELIABILITY.md carries.
func (t *Tally) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "| bodies | admitted | denied | admitted, Cilium refuses | denied, Cilium refuses | admitted, reach not the contract's | denied, reach the contract's | flows looked up |\n|---|---|---|---|---|---|---|---|\n")
	off := 0
	for _, o := range t.Defects {
		if o.Verdict.Allowed && o.ParseErr == nil && len(o.Findings) > 0 {
			off++
		}
	}
	over := 0
	for _, n := range t.OverStrictBy {
		over += n
	}
	fmt.Fprintf(&b, "| %d | %d | %d | %d | %d | %d | %d | %d |\n\n", t.Bodies, t.Admitted, t.Denied, t.AdmittedCiliumRejected, t.DeniedCiliumRejected, off, over, t.Flows)
	fmt.Fprintf(&b, "| denied by | bodies | of which Cilium parses and the pods reach what the contract says |\n|---|---|---|\n")
	for _, r := range sortedByCount(t.DeniedBy) {
		fmt.Fprintf(&b, "| `%s` | %d | %d |\n", r, t.DeniedBy[r], t.OverStrictBy[r])
	}
	return b.String()
}

// OverStrictReport lists one example body per rule that denied bodies under
// which the pods reach what the contract says.
func (t *Tally) OverStrictReport() string {
	var b strings.Builder
	for _, r := range sortedByCount(t.OverStrictBy) {
		o := t.OverStrictEg[r]
		js, _ := json.Marshal(o.Body.Object["spec"])
		fmt.Fprintf(&b, "%d denied by %s, e.g. after %v: %s\n  spec: %s\n", t.OverStrictBy[r], r, o.Body.Mutations, o.Verdict.Message, js)
	}
	return b.String()
}

func sortedByCount(m map[string]int) []string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			return m[b] - m[a]
		}
		return strings.Compare(a, b)
	})
	return keys
}
