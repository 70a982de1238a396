package main

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// sink collects the latencies of one cell: whole operations (what the host
// sees) and the write requests inside them (what admission acts on).
type sink struct {
	mu       sync.Mutex
	ops      []time.Duration
	writes   []time.Duration
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

func (s *sink) write(d time.Duration) {
	s.mu.Lock()
	s.writes = append(s.writes, d)
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
			s.write(time.Since(start))
		}
	}
	return resp, err
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
