package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The verdict names every measure at which ours is not below the best peer,
// and nothing where it is.
func TestCompareWithPeersNamesWhereOursIsNotAhead(t *testing.T) {
	configs := configsFor(true, false, false)
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	tests := []struct {
		name  string
		costs map[string]cost
		want  []string
	}{
		{
			name: "ahead of both peers on every measure says nothing",
			costs: map[string]cost{
				ours:         {addP50: ms(1), addP99: ms(5), addCPU: 0.5},
				"kyverno":    {addP50: ms(2), addP99: ms(9), addCPU: 1.5},
				"gatekeeper": {addP50: ms(3), addP99: ms(6), addCPU: 0.9},
			},
		},
		{
			name: "behind the best peer on p99 and CPU names both, against that peer",
			costs: map[string]cost{
				ours:         {addP50: ms(1), addP99: ms(7), addCPU: 1.0},
				"kyverno":    {addP50: ms(2), addP99: ms(9), addCPU: 0.8},
				"gatekeeper": {addP50: ms(3), addP99: ms(6), addCPU: 0.9},
			},
			want: []string{
				"added p99 at 8 clients 7.000 ms vs gatekeeper 6.000",
				"added CPU at 8 clients 1.000 CPU-s/1k vs kyverno 0.800",
			},
		},
		{
			name: "a tie is not ahead",
			costs: map[string]cost{
				ours:         {addP50: ms(2), addP99: ms(5), addCPU: 0.5},
				"kyverno":    {addP50: ms(2), addP99: ms(9), addCPU: 1.5},
				"gatekeeper": {addP50: ms(3), addP99: ms(6), addCPU: 0.9},
			},
			want: []string{"added p50 at 8 clients 2.000 ms vs kyverno 2.000"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, compareWithPeers(8, tc.costs, configs)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// CPU per admission divides the process's CPU over the cells by the writes
// the cells made, and "added" subtracts the apiserver's CPU of none.
func TestCellCostChargesCPUToAdmittedWrites(t *testing.T) {
	cell := func(writes int, cpu map[string]time.Duration) *cellResult {
		s := &sink{}
		for range writes {
			s.write(http.MethodPost, time.Millisecond)
			s.op(time.Millisecond, nil)
		}
		return &cellResult{elapsed: time.Second, sink: s, cpu: cpu}
	}
	base := []*cellResult{cell(100, map[string]time.Duration{"kube-apiserver": 100 * time.Millisecond})}
	got := cellCost([]*cellResult{
		cell(100, map[string]time.Duration{"kube-apiserver": 150 * time.Millisecond, "kyverno": 80 * time.Millisecond}),
		cell(100, map[string]time.Duration{"kube-apiserver": 150 * time.Millisecond, "kyverno": 120 * time.Millisecond}),
	}, base, config{Name: "kyverno", Peer: "kyverno"})
	want := cost{ops: 100, ratio: 1, p50: time.Millisecond, p99: time.Millisecond, apiserver: 1.5, engine: 1.0, addAPIServer: 0.5, addCPU: 1.5, engineName: "kyverno"}
	if d := cmp.Diff(want, got, cmp.AllowUnexported(cost{}), cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 })); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

// The paired interval resolves a shift every round shows, and not one the
// rounds disagree on.
func TestBootstrapIntervalExcludesZeroOnlyForAConsistentShift(t *testing.T) {
	for _, tc := range []struct {
		diffs []float64
		want  bool
	}{
		{[]float64{-1.1, -0.9, -1.3, -1.0, -0.8, -1.2, -0.9, -1.1, -1.0, -1.0}, true},
		{[]float64{-1, 1.2, -0.8, 0.9, -1.1, 1, -0.7, 0.8, -1.2, 1.1}, false},
	} {
		lo, hi := bootstrapMean(tc.diffs, 10000)
		if got := hi < 0 || lo > 0; got != tc.want {
			t.Errorf("%v: interval [%.2f, %.2f] excludes 0: %v, want %v", tc.diffs, lo, hi, got, tc.want)
		}
	}
}
