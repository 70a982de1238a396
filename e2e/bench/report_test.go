package main

import (
	"net/http"
	"strings"
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

// The paired report gives a verdict for a shift every round shows, and
// none for differences whose sign the rounds disagree on.
func TestPairedReportJudgesOnlyAShiftTheIntervalResolves(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	// cells gives config one round per p50, its creates at that latency.
	cells := func(config string, p50s ...float64) []*cellResult {
		var out []*cellResult
		for r, v := range p50s {
			s := &sink{}
			s.write(http.MethodPost, ms(v))
			out = append(out, &cellResult{round: r, config: config, sink: s})
		}
		return out
	}
	key := func(c, w string, n int) string { return c + "/" + w }
	base := []float64{10, 11, 9, 10, 12, 10, 11, 9, 10, 10}
	shifted, noisy := make([]float64, len(base)), make([]float64, len(base))
	for i, v := range base {
		shifted[i] = v - 1 - 0.1*float64(i%3)
		noisy[i] = v + []float64{-1, 1}[i%2]
	}
	results := map[string][]*cellResult{
		key(ours, "shift", 1): cells(ours, base...), key(cachedConfig.Name, "shift", 1): cells(cachedConfig.Name, shifted...),
		key(ours, "noise", 1): cells(ours, base...), key(cachedConfig.Name, "noise", 1): cells(cachedConfig.Name, noisy...),
	}
	report := pairedReport([]workload{{Name: "shift"}, {Name: "noise"}}, []int{1}, configsFor(false, true, false), results, key)
	for _, want := range []string{"| shift | 1 | POST | 10 | -1.09 | [", "] | p50: vaps+webhook-cached faster; p99: vaps+webhook-cached faster |",
		"| noise | 1 | POST | 10 | +0.00 | [", "] | p50: no difference resolved; p99: no difference resolved |"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
}
