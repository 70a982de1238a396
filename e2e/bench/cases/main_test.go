package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A case is a leaf: a parent test is not counted on top of its subtests,
// and a case one enforcer did not reach still gets a row. A parent that
// failed before its subtests counts once, and a refusal with another
// message is told apart from an admission.
func TestLeavesAndCounts(t *testing.T) {
	ours := &run{enforcer: "sandbox-fence", results: map[string]*result{
		"TestA":        {action: "pass"},
		"TestA/one":    {action: "pass"},
		"TestA/two":    {action: "pass"},
		"TestB":        {action: "pass"},
		"TestShipped":  {action: "pass"},
		"TestOnlyHere": {action: "pass"},
		"TestC/one":    {action: "pass"},
		"TestC/two":    {action: "pass"},
		"TestD":        {action: "pass"},
	}}
	peer := &run{enforcer: "kyverno", results: map[string]*result{
		"TestA":       {action: "fail"},
		"TestA/one":   {action: "pass"},
		"TestA/two":   {action: "fail", why: []string{"epoch_test.go:60: lowering: admitted, want a denial by kyverno.svc"}},
		"TestB":       {action: "pass", codes: []string{"403"}},
		"TestShipped": {action: "skip", why: []string{"helpers_test.go:120: n/a: checks the shipped sandbox-fence bundle itself"}},
		"TestC":       {action: "fail", why: []string{"config_test.go:87: marker denied: context deadline exceeded (last: admitted)"}},
		"TestD":       {action: "fail", why: []string{`breakglass_test.go:94: denial message lacks "over the limit"`}},
	}}
	ours.results["TestShipped/sub"] = &result{action: "pass"}
	cases := leaves([]*run{ours, peer}, nil)
	if d := cmp.Diff([]string{"TestA/one", "TestA/two", "TestB", "TestC/one", "TestC/two", "TestD", "TestOnlyHere", "TestShipped/sub"}, cases); d != "" {
		t.Errorf("leaves (-want +got):\n%s", d)
	}
	type counts struct{ Right, Wrong, NA int }
	got := counts{count(peer, cases, "pass"), wrong(peer, cases), count(peer, cases, "skip")}
	if d := cmp.Diff(counts{Right: 2, Wrong: 3, NA: 1}, got); d != "" {
		t.Errorf("peer counts (-want +got):\n%s", d)
	}
	md := table([]*run{ours, peer}, nil)
	for _, row := range []string{"| wrong: " + wrongAdmitted + " | 0 | 2 |", "| wrong: " + wrongMessage + " | 0 | 1 |", "| wrong: " + wrongValid + " | 0 | 0 |"} {
		if !strings.Contains(md, row) {
			t.Errorf("the table lacks the row %q:\n%s", row, md)
		}
	}
	cells := []string{cell(resultFor(peer, "TestA/two")), cell(resultFor(peer, "TestShipped/sub")), cell(resultFor(peer, "TestOnlyHere"))}
	want := []string{"**wrong**: epoch_test.go:60: lowering: admitted, want a denial by kyverno.svc", "n/a", "not run"}
	if d := cmp.Diff(want, cells); d != "" {
		t.Errorf("cells (-want +got):\n%s", d)
	}
}

// Every top-level test the suite lists is a case, also one no run reached
// (the run timed out or panicked before it): it is a row, counted as not
// run, and the shipped bundle not finishing one is what main refuses.
func TestACaseNoRunReachedIsARowAndCountsAsUnfinished(t *testing.T) {
	suite := parseList([]byte("TestA\nTestB\nTestCutShort\nTestNeverStarted\nok  \tgithub.com/sandbox-fence/sandbox-fence/e2e\t0.1s\n"))
	if d := cmp.Diff([]string{"TestA", "TestB", "TestCutShort", "TestNeverStarted"}, suite); d != "" {
		t.Fatalf("parseList (-want +got):\n%s", d)
	}
	ours := &run{enforcer: "sandbox-fence", results: map[string]*result{
		"TestA":        {action: "pass"},
		"TestB":        {action: "pass"},
		"TestB/one":    {action: "skip"},
		"TestCutShort": {}, // started, never ended: the test binary was killed
	}}
	cases := leaves([]*run{ours}, suite)
	if d := cmp.Diff([]string{"TestA", "TestB/one", "TestCutShort", "TestNeverStarted"}, cases); d != "" {
		t.Errorf("leaves (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"TestCutShort", "TestNeverStarted"}, unfinished(ours, cases)); d != "" {
		t.Errorf("unfinished (-want +got):\n%s", d)
	}
	md := table([]*run{ours}, suite)
	for _, row := range []string{"| TestCutShort | not finished |", "| TestNeverStarted | not run |", "| **not run or not finished** | **2** |"} {
		if !strings.Contains(md, row) {
			t.Errorf("the table lacks the row %q:\n%s", row, md)
		}
	}
}
