//go:build soak

package soak

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// figure is one measured number of a scenario. A must-be-zero figure is an
// invariant of the fence: the scenario fails when it is not 0.
type figure struct {
	scenario string
	name     string
	value    string
	zero     bool // must be 0
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
	row := figure{scenario: scenario, name: name, value: fmt.Sprint(v), zero: mustBeZero, ok: !mustBeZero || v == 0}
	if !row.ok {
		t.Errorf("%s: %s = %d, must be 0", scenario, name, v)
	}
	f.add(row)
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
	fmt.Fprintf(&b, "| scenario | figure | value | must be 0 |\n|---|---|---|---|\n")
	failed := 0
	for _, r := range f.rows {
		mark := ""
		if r.zero {
			mark = "yes, ok"
			if !r.ok {
				mark = "yes, VIOLATED"
				failed++
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.scenario, r.name, r.value, mark)
	}
	fmt.Fprintf(&b, "\nsoak: %d figures, %d must-be-0 violated, total %s (%s)\n", len(f.rows), failed,
		total.Round(time.Second), time.Now().UTC().Format(time.RFC3339))
	return b.String()
}
