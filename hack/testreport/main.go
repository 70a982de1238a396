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
//
// Given go test's own arguments after --, and the module directories they
// ran in (-modules), it also lists the tests of those packages from their
// source, with the same -tags (ListTests), and fails on a listed test,
// fuzz target or example that never
// started, unless the allowlist names it as notRun for this run. A -run or
// -skip among the arguments narrows what is expected the way it narrows
// what go test runs, and the summary says so.
//
//	{ go -C e2e test -json -tags e2e ./...; } 2>&1 | bin/testreport -run e2e -modules e2e -- -tags e2e ./...
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/sandbox-fence/sandbox-fence/internal/reporoot"
)

func main() {
	run := flag.String("run", "", "the name of this run in the allowlist (test-unit, e2e, e2e-kind, ...)")
	allow := flag.String("allow", "hack/testreport/allowed-skips.yaml", "the skip allowlist")
	raw := flag.String("json", "", "also write the raw events to this file")
	failures := flag.String("failures", "", "write the failed tests, one \"package test\" line each, to this file")
	verbose := flag.Bool("v", false, "print every test's output, as go test -v")
	goCmd := flag.String("go", "go", "the go command that ran the tests (for go list)")
	modules := flag.String("modules", ".", "the module directories go test ran in, space-separated (with go test's arguments after --)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: go test -json ARGS | testreport -run NAME [flags] [-modules DIRS -- ARGS]")
		flag.PrintDefaults()
	}
	flag.Parse()
	var list *listing
	if flag.NArg() > 0 {
		list = &listing{goCmd: *goCmd, dirs: strings.Fields(*modules), args: flag.Args()}
	}
	if err := mainErr(*run, *allow, *raw, *failures, *verbose, list); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(1)
	}
}

// listing is how to list the run's tests: the go command, the module
// directories and go test's arguments.
type listing struct {
	goCmd string
	dirs  []string
	args  []string
}

func mainErr(run, allowPath, raw, failures string, verbose bool, list *listing) error {
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
	if list != nil {
		args, filter := GoTestArgs(list.args)
		start := time.Now()
		listed, failed, err := ListTests(list.goCmd, list.dirs, args, reporoot.Module)
		if err != nil {
			r.ListError = err.Error()
		} else {
			fmt.Fprintf(os.Stdout, "testreport: tests listed from the source in %s: %.1fs\n", strings.Join(list.dirs, " "), time.Since(start).Seconds())
		}
		r.Filter, r.Listed, r.ListFailed = filter, listed, failed
	}
	problems := r.Summary(allowPath)
	if failures != "" {
		if err := os.WriteFile(failures, []byte(r.FailureLines()), 0o644); err != nil {
			return err
		}
	}
	if len(problems) > 0 || len(r.Failed) > 0 || len(r.FailPkg) > 0 {
		return fmt.Errorf("%d failed tests, %d failed packages, %d problems (skips, tests that never ran)", len(r.Failed), len(r.FailPkg), len(problems))
	}
	return nil
}
