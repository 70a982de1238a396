package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// CPU per admission divides the process's CPU over the cells by the writes
// the cells made, and "added" subtracts the apiserver's and etcd's CPU of
// none.
func TestCellCostChargesCPUToAdmittedWrites(t *testing.T) {
	cell := func(writes int, cpu map[string]time.Duration) *cellResult {
		s := &sink{}
		for range writes {
			s.write(http.MethodPost, time.Millisecond)
			s.op(time.Millisecond, nil)
		}
		return &cellResult{elapsed: time.Second, sink: s, cpu: cpu}
	}
	base := []*cellResult{cell(100, map[string]time.Duration{"kube-apiserver": 100 * time.Millisecond, "etcd": 20 * time.Millisecond})}
	got := cellCost([]*cellResult{
		cell(100, map[string]time.Duration{"kube-apiserver": 150 * time.Millisecond, "etcd": 30 * time.Millisecond, "kyverno": 80 * time.Millisecond}),
		cell(100, map[string]time.Duration{"kube-apiserver": 150 * time.Millisecond, "etcd": 50 * time.Millisecond, "kyverno": 120 * time.Millisecond}),
	}, base, config{Name: "kyverno", Peer: "kyverno"})
	want := cost{ops: 100, ratio: 1, p50: time.Millisecond, p99: time.Millisecond, apiserver: 1.5, etcd: 0.4, engine: 1.0, addServers: 0.7, addCPU: 1.7, engineName: "kyverno"}
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
		key(ours, "shift", 1): cells(ours, shifted...), key(liveConfig.Name, "shift", 1): cells(liveConfig.Name, base...),
		key(ours, "noise", 1): cells(ours, base...), key(liveConfig.Name, "noise", 1): cells(liveConfig.Name, noisy...),
	}
	report := pairedReport([]workload{{Name: "shift"}, {Name: "noise"}}, []int{1}, configsFor(false, true, false), results, key)
	for _, want := range []string{"| shift | 1 | POST | 10 | -1.09 | [", "] | p50: vaps+webhook faster; p99: vaps+webhook faster |",
		"| noise | 1 | POST | 10 | +0.00 | [", "] | p50: no difference resolved; p99: no difference resolved |"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
}

// The webhook's owner reads of a cell are its histogram's difference around
// the cell, by source and result, summed over the rounds of the cell.
func TestOwnerReadTableSumsEachCellsReads(t *testing.T) {
	body := func(live, sum float64) scrape {
		return parseMetrics(fmt.Appendf(nil, `%[1]s_bucket{kind="SandboxClaim",result="found",source="live",le="0.005"} %[2]g
%[1]s_bucket{kind="SandboxClaim",result="found",source="live",le="+Inf"} %[2]g
%[1]s_sum{kind="SandboxClaim",result="found",source="live"} %[3]g
%[1]s_count{kind="SandboxClaim",result="found",source="live"} %[2]g
`, lookupMetric, live, sum))
	}
	key := func(c, w string, n int) string { return c + "/" + w }
	results := map[string][]*cellResult{key(ours, "cnp", 1): {
		{owner: body(30, 0.06).diff(body(10, 0.02))},
		{owner: body(25, 0.05).diff(body(5, 0.01))},
	}}
	got := ownerReadTable([]workload{{Name: "cnp"}}, []int{1}, configsFor(false, false, false), results, key)
	if want := "| vaps+webhook | cnp | 1 | SandboxClaim live found | 40 | 2.000 | 0.005: 40 |"; !strings.Contains(got, want) {
		t.Errorf("the table lacks %q:\n%s", want, got)
	}
}

// The open loop times an operation from its scheduled send: ten sends
// 10 ms apart onto one worker whose operation takes 20 ms queue behind each
// other, and the last waits over 100 ms, where a closed loop would report 20.
func TestOpenLoopTimesFromTheScheduledSend(t *testing.T) {
	w := workload{Name: "slow", op: func(context.Context, int) error { time.Sleep(20 * time.Millisecond); return nil }}
	s, _ := runOpenWindow(context.Background(), &hostClients{rec: &recorder{}}, w, 100, 1, 100*time.Millisecond)
	if len(s.ops) != 10 {
		t.Fatalf("%d operations sent, want 10 (100 ops/s for 100 ms)", len(s.ops))
	}
	if last := slices.Max(s.ops); last < 100*time.Millisecond {
		t.Errorf("the last queued operation took %s from its scheduled send, want over 100ms", last)
	}
}
