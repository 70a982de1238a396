package framework

import (
	"context"
	"flag"
	"os"
	"testing"
)

// Lifecycle is what a suite's TestMain drives: a provider that sets up an
// environment and tears it down.
type Lifecycle interface {
	Setup(ctx context.Context) (*Env, error)
	// Teardown ends what Setup started; failed asks for component logs to be
	// kept in artifactDir (may be "").
	Teardown(ctx context.Context, failed bool, artifactDir string) error
}

// SuiteHooks are a suite's optional steps around its tests.
type SuiteHooks struct {
	// Ready runs once the environment is up, before any test; an error
	// fails the run without running tests (say, a part the suite needs is
	// missing).
	Ready func(*Env) error
	// After runs after the tests, before teardown, and may turn the exit
	// code into a failure (say, writing a report failed).
	After func(code int) int
}

// RunSuite is the body of a TestMain: set up, run the tests, tear down, and
// keep component logs in $E2E_ARTIFACTS when anything failed. A teardown
// error fails an otherwise green run: a process or a mount left behind is a
// defect of the run, not noise.
func RunSuite(m *testing.M, lc Lifecycle, name string, logf Logf, hooks SuiteHooks) int {
	// go test -list runs nothing, so it needs no cluster: the correctness
	// table of e2e/bench/cases lists the suite's tests this way.
	if !flag.Parsed() {
		flag.Parse()
	}
	if f := flag.Lookup("test.list"); f != nil && f.Value.String() != "" {
		return m.Run()
	}
	ctx := context.Background()
	artifacts := os.Getenv("E2E_ARTIFACTS")
	env, err := lc.Setup(ctx)
	if err == nil && hooks.Ready != nil {
		err = hooks.Ready(env)
	}
	if err != nil {
		logf("%s setup failed: %v", name, err)
		if terr := lc.Teardown(ctx, true, artifacts); terr != nil {
			logf("teardown: %v", terr)
		}
		return 1
	}
	code := m.Run()
	if hooks.After != nil {
		code = hooks.After(code)
	}
	if err := lc.Teardown(ctx, code != 0, artifacts); err != nil {
		logf("teardown: %v", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}
