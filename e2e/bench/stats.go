package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// sink collects the latencies of one cell: whole operations (what the host
// sees) and the write requests inside them (what admission acts on).
type sink struct {
	mu     sync.Mutex
	ops    []time.Duration
	writes []time.Duration
	// byVerb are writes per HTTP method and resource ("POST
	// ciliumnetworkpolicies"): a create (whose owner the webhook reads), a
	// delete (which reads none) and the claim a host creates first are told
	// apart.
	byVerb   map[string][]time.Duration
	errs     int
	firstErr error
}

func (s *sink) op(d time.Duration, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.errs++
		if s.firstErr == nil {
			s.firstErr = err
		}
		return
	}
	s.ops = append(s.ops, d)
}

func (s *sink) write(verb string, d time.Duration) {
	s.mu.Lock()
	s.writes = append(s.writes, d)
	if s.byVerb == nil {
		s.byVerb = map[string][]time.Duration{}
	}
	s.byVerb[verb] = append(s.byVerb[verb], d)
	s.mu.Unlock()
}

// recorder is a RoundTripper that times every write request (POST, PATCH,
// PUT, DELETE) into the current cell's sink; reads are not admitted, so they
// are left out of the write-request figures.
type recorder struct {
	next    http.RoundTripper
	current atomic.Pointer[sink]
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := r.next.RoundTrip(req)
	if req.Method != http.MethodGet {
		if s := r.current.Load(); s != nil && err == nil {
			s.write(req.Method+" "+resourceOf(req.URL.Path), time.Since(start))
		}
	}
	return resp, err
}

// resourceOf is the resource a namespaced request's path names
// (.../namespaces/<ns>/<resource>[/<name>]), so that a workload's creates of
// two kinds are told apart.
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i, p := range parts {
		if p == "namespaces" && i+2 < len(parts) {
			return parts[i+2]
		}
	}
	return parts[len(parts)-1]
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(0, min(rank, len(sorted)-1))]
}

// summary is what a table row reports.
type summary struct {
	N             int
	Errors        int
	Seconds       float64
	Throughput    float64 // operations per second
	P50, P90, P99 time.Duration
	WriteP50      time.Duration
	WriteP99      time.Duration
	// PerRound is the throughput of each round, to show the spread.
	PerRound []float64
}

func summarise(cells []*cellResult) summary {
	var ops, writes []time.Duration
	var s summary
	for _, c := range cells {
		ops = append(ops, c.sink.ops...)
		writes = append(writes, c.sink.writes...)
		s.Errors += c.sink.errs
		s.Seconds += c.elapsed.Seconds()
		s.PerRound = append(s.PerRound, float64(len(c.sink.ops))/c.elapsed.Seconds())
	}
	slices.Sort(ops)
	slices.Sort(writes)
	s.N = len(ops)
	if s.Seconds > 0 {
		s.Throughput = float64(s.N) / s.Seconds
	}
	s.P50, s.P90, s.P99 = percentile(ops, 50), percentile(ops, 90), percentile(ops, 99)
	s.WriteP50, s.WriteP99 = percentile(writes, 50), percentile(writes, 99)
	return s
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

func deltaMs(d, base time.Duration) string {
	return fmt.Sprintf("%+.2f", float64(d-base)/float64(time.Millisecond))
}

func spread(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f-%.0f", slices.Min(v), slices.Max(v))
}

// pairs are the comparisons pairedReport makes when both configurations
// ran: the owner read's two modes, the A/A control, the VAPs against no
// fence, and ours against each peer.
var pairs = [][2]string{{ours, liveConfig.Name}, {aaConfig.Name, "none"}, {"vaps", "none"}, {ours, "kyverno"}, {ours, "gatekeeper"}}

// pairedReport compares each pair of configurations cell by cell, verb by
// verb, round by round: the difference of their write p50 and p99 in the
// same round (the rounds interleave the configurations, so drift lands on
// both), and a bootstrap 95% interval of its mean over the rounds. A
// verdict is given only where the interval excludes 0.
func pairedReport(wls []workload, conc []int, configs []config, results map[string][]*cellResult, key func(string, string, int) string) string {
	ran := map[string]bool{}
	for _, c := range configs {
		ran[c.Name] = true
	}
	var b strings.Builder
	for _, p := range pairs {
		if !ran[p[0]] || !ran[p[1]] {
			continue
		}
		fmt.Fprintf(&b, "#### %s against %s, paired by round\n\n", p[0], p[1])
		b.WriteString("| workload | clients | verb | rounds | p50 difference, ms | 95% interval | p99 difference, ms | 95% interval | verdict |\n|---|---:|---|---:|---:|---|---:|---|---|\n")
		for _, w := range wls {
			for _, n := range conc {
				a, o := results[key(p[0], w.Name, n)], results[key(p[1], w.Name, n)]
				vs := verbs(a)
				if n == openLoop {
					vs = []string{opFromSchedule}
				}
				for _, verb := range vs {
					fmt.Fprintf(&b, "| %s | %s | %s |", w.Name, clientsLabel(n), verb)
					var verdicts []string
					for i, pct := range []float64{50, 99} {
						d := pairedDiffs(a, o, verb, pct)
						lo, hi := bootstrapMean(d, 10000)
						if i == 0 {
							fmt.Fprintf(&b, " %d |", len(d))
						}
						fmt.Fprintf(&b, " %+.2f | [%+.2f, %+.2f] |", mean(d), lo, hi)
						switch {
						case len(d) < 2:
							verdicts = append(verdicts, fmt.Sprintf("p%.0f: too few rounds", pct))
						case hi < 0:
							verdicts = append(verdicts, fmt.Sprintf("p%.0f: %s faster", pct, p[0]))
						case lo > 0:
							verdicts = append(verdicts, fmt.Sprintf("p%.0f: %s slower", pct, p[0]))
						default:
							verdicts = append(verdicts, fmt.Sprintf("p%.0f: no difference resolved", pct))
						}
					}
					fmt.Fprintf(&b, " %s |\n", strings.Join(verdicts, "; "))
				}
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// openLoop is the clients value of an open-loop cell (runOpenWindow).
const openLoop = 0

// clientsLabel is a cell's clients column: the count, or "open".
func clientsLabel(n int) string {
	if n == openLoop {
		return "open"
	}
	return fmt.Sprint(n)
}

// opFromSchedule is the "verb" of an open-loop cell: the whole operation,
// timed from its scheduled send.
const opFromSchedule = "op from its scheduled send"

// verbs are the write methods cells recorded, in name order.
func verbs(cells []*cellResult) []string {
	var out []string
	for _, c := range cells {
		for v := range c.sink.byVerb {
			if !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
	}
	slices.Sort(out)
	return out
}

// pairedDiffs returns, for each round both a and b measured, a's pct
// percentile of verb's writes minus b's, in milliseconds.
func pairedDiffs(a, b []*cellResult, verb string, pct float64) []float64 {
	at := func(c *cellResult) (float64, bool) {
		ws := slices.Clone(c.sink.byVerb[verb])
		if verb == opFromSchedule {
			ws = slices.Clone(c.sink.ops)
		}
		if len(ws) == 0 {
			return 0, false
		}
		slices.Sort(ws)
		return float64(percentile(ws, pct)) / float64(time.Millisecond), true
	}
	byRound := map[int]*cellResult{}
	for _, c := range b {
		byRound[c.round] = c
	}
	var d []float64
	for _, c := range a {
		if o, ok := byRound[c.round]; ok {
			x, okA := at(c)
			y, okB := at(o)
			if okA && okB {
				d = append(d, x-y)
			}
		}
	}
	return d
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// bootstrapMean is the 2.5th and 97.5th percentile of the mean of v over
// n resamples with replacement (a fixed seed: the same data, the same
// interval).
func bootstrapMean(v []float64, n int) (lo, hi float64) {
	if len(v) == 0 {
		return math.NaN(), math.NaN()
	}
	r := rand.New(rand.NewPCG(1, 2))
	means := make([]float64, n)
	for i := range means {
		var s float64
		for range v {
			s += v[r.IntN(len(v))]
		}
		means[i] = s / float64(len(v))
	}
	slices.Sort(means)
	return means[n*25/1000], means[n*975/1000]
}
