package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A case is a leaf: a parent test is not counted on top of its subtests,
// and a case one enforcer did not reach still gets a row.
func TestLeavesAndCounts(t *testing.T) {
	ours := &run{enforcer: "sandbox-fence", results: map[string]*result{
		"TestA":        {action: "pass"},
		"TestA/one":    {action: "pass"},
		"TestA/two":    {action: "pass"},
		"TestB":        {action: "pass"},
		"TestShipped":  {action: "pass"},
		"TestOnlyHere": {action: "pass"},
	}}
	peer := &run{enforcer: "kyverno", results: map[string]*result{
		"TestA":       {action: "fail"},
		"TestA/one":   {action: "pass"},
		"TestA/two":   {action: "fail", why: []string{"epoch_test.go:60: lowering: admitted, want a denial by kyverno.svc"}},
		"TestB":       {action: "pass", codes: []string{"403"}},
		"TestShipped": {action: "skip", why: []string{"helpers_test.go:120: n/a: checks the shipped sandbox-fence bundle itself"}},
	}}
	ours.results["TestShipped/sub"] = &result{action: "pass"}
	cases := leaves([]*run{ours, peer})
	if d := cmp.Diff([]string{"TestA/one", "TestA/two", "TestB", "TestOnlyHere", "TestShipped/sub"}, cases); d != "" {
		t.Errorf("leaves (-want +got):\n%s", d)
	}
	type counts struct{ Right, Wrong, NA int }
	got := counts{count(peer, cases, "pass"), wrong(peer, cases), count(peer, cases, "skip")}
	if d := cmp.Diff(counts{Right: 2, Wrong: 1, NA: 1}, got); d != "" {
		t.Errorf("peer counts (-want +got):\n%s", d)
	}
	cells := []string{cell(resultFor(peer, "TestA/two")), cell(resultFor(peer, "TestShipped/sub")), cell(resultFor(peer, "TestOnlyHere"))}
	want := []string{"**wrong**: epoch_test.go:60: lowering: admitted, want a denial by kyverno.svc", "n/a", "not run"}
	if d := cmp.Diff(want, cells); d != "" {
		t.Errorf("cells (-want +got):\n%s", d)
	}
}
