// Command testreport reads `go test -json` on stdin and makes every skipped
// test visible: it prints what go test prints without -v, then each skip
// with its message, and fails when a test skipped that the allowlist does
// not name for this run, or when an entry of the allowlist no longer skips.
// A skipped check must never read as a pass (docs/testing.md).
//
//	go test -json ./... 2>&1 | bin/testreport -run test-unit   (make testreport builds it)
//
// -json keeps the raw events and -failures writes one "package test" line
// per failed test ("package (package)" for a package that failed outside
// its tests: build, TestMain, timeout), for scripts that run the suites and read which tests
// failed (a mutation check).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/sandbox-fence/sandbox-fence/internal/reporoot"
)

func main() {
	run := flag.String("run", "", "the name of this run in the allowlist (test-unit, e2e, e2e-kind, ...)")
	allow := flag.String("allow", "hack/testreport/allowed-skips.yaml", "the skip allowlist")
	raw := flag.String("json", "", "also write the raw events to this file")
	failures := flag.String("failures", "", "write the failed tests, one \"package test\" line each, to this file")
	verbose := flag.Bool("v", false, "print every test's output, as go test -v")
	flag.Parse()
	if err := mainErr(*run, *allow, *raw, *failures, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(1)
	}
}

func mainErr(run, allowPath, raw, failures string, verbose bool) error {
	if run == "" {
		return fmt.Errorf("-run names the run (the allowlist's runs)")
	}
	allow, err := LoadAllowlist(allowPath)
	if err != nil {
		return err
	}
	// Package names in the allowlist are below the root module (e2e,
	// pkg/fence, hack/chart), whichever of the repository's modules ran
	// the tests.
	r := &Report{Module: reporoot.Module, Run: run, Allow: allow, Verbose: verbose, Out: os.Stdout}

	in := io.Reader(os.Stdin)
	if raw != "" {
		f, err := os.Create(raw)
		if err != nil {
			return err
		}
		defer f.Close()
		in = io.TeeReader(os.Stdin, f)
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 1<<16), 64<<20)
	for sc.Scan() {
		r.Line(sc.Text())
	}
	if err := sc.Err(); err != nil {
		return err
	}
	problems := r.Summary(allowPath)
	if failures != "" {
		if err := os.WriteFile(failures, []byte(r.FailureLines()), 0o644); err != nil {
			return err
		}
	}
	if len(problems) > 0 || len(r.Failed) > 0 || len(r.FailPkg) > 0 {
		return fmt.Errorf("%d failed tests, %d failed packages, %d skip problems", len(r.Failed), len(r.FailPkg), len(problems))
	}
	return nil
}
