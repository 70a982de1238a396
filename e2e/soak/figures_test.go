//go:build soak

package soak

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// figure is one measured number of a scenario. An asserted figure is an
// invariant of the fence (= 0) or a bound the run must meet (>= 1, <= n):
// the scenario fails when it does not hold.
type figure struct {
	scenario string
	name     string
	value    string
	bound    string // "" when only reported
	ok       bool
}

type figureTable struct {
	mu   sync.Mutex
	rows []figure
}

var figures = &figureTable{}

// count records an integer figure; mustBeZero makes it an assertion.
func (f *figureTable) count(t *testing.T, scenario, name string, v int64, mustBeZero bool) {
	t.Helper()
	if !mustBeZero {
		f.add(figure{scenario: scenario, name: name, value: fmt.Sprint(v), ok: true})
		return
	}
	f.bounded(t, scenario, name, v, "= 0", v == 0)
}

// atLeast records a figure that must be at least min.
func (f *figureTable) atLeast(t *testing.T, scenario, name string, v, min int64) {
	t.Helper()
	f.bounded(t, scenario, name, v, fmt.Sprintf(">= %d", min), v >= min)
}

// atMost records a figure that must be at most max.
func (f *figureTable) atMost(t *testing.T, scenario, name string, v, max int64) {
	t.Helper()
	f.bounded(t, scenario, name, v, fmt.Sprintf("<= %d", max), v <= max)
}

func (f *figureTable) bounded(t *testing.T, scenario, name string, v int64, bound string, ok bool) {
	t.Helper()
	if !ok {
		t.Errorf("%s: %s = %d, must be %s", scenario, name, v, bound)
	}
	f.add(figure{scenario: scenario, name: name, value: fmt.Sprint(v), bound: bound, ok: ok})
}

// note records a measured value that is reported, not asserted.
func (f *figureTable) note(scenario, name, format string, args ...any) {
	f.add(figure{scenario: scenario, name: name, value: fmt.Sprintf(format, args...), ok: true})
}

func (f *figureTable) add(r figure) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rows = append(f.rows, r)
	logf("figure %s | %s = %s", r.scenario, r.name, r.value)
}

// render is the markdown table RELIABILITY.md quotes.
func (f *figureTable) render(total time.Duration) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "| scenario | figure | value | asserted |\n|---|---|---|---|\n")
	asserted, failed := 0, 0
	for _, r := range f.rows {
		mark := ""
		if r.bound != "" {
			asserted++
			mark = "must be " + r.bound + ", ok"
			if !r.ok {
				mark = "must be " + r.bound + ", VIOLATED"
				failed++
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.scenario, r.name, r.value, mark)
	}
	fmt.Fprintf(&b, "\nsoak: %d figures, %d asserted, %d violated, total %s (%s)\n", len(f.rows), asserted, failed,
		total.Round(time.Second), time.Now().UTC().Format(time.RFC3339))
	return b.String()
}
