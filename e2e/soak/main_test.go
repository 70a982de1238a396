//go:build soak

// Package soak is the reliability run of issue 7 (`make soak`): the fence
// under load, faults and hostile input on the local control plane, each
// scenario ending in figures. A figure marked "must be 0" fails the run when
// it is not; the table of every figure is printed at the end and written to
// $SOAK_FIGURES (RELIABILITY.md quotes it). Loopback only, bounded in time:
// every scenario stops by itself.
package soak

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/e2e/provider"
)

// local is the control plane every scenario runs on: the soak stops and
// restarts its processes, so it needs the local provider's handles, not only
// an Env.
var (
	local *provider.Local
	env   *framework.Env
)

var logf = framework.StderrLogf("soak")

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if p := os.Getenv(provider.EnvProvider); p != "" && p != "local" {
		// Stopping the webhook and kube-apiserver needs their processes.
		logf("%s=%s: the soak runs only on the local control plane (it stops and restarts its processes)", provider.EnvProvider, p)
		return 2
	}
	l, err := provider.NewLocal("soak", logf)
	if err != nil {
		logf("%v", err)
		return 2
	}
	local = l
	start := time.Now()
	return framework.RunSuite(m, local, "local provider", logf, framework.SuiteHooks{
		Ready: func(e *framework.Env) error {
			env = e
			if !env.WebhookInstalled {
				return fmt.Errorf("the webhook is not running: the soak needs it")
			}
			return nil
		},
		After: func(code int) int {
			table := figures.render(time.Since(start))
			fmt.Fprint(os.Stdout, "\n"+table)
			if out := os.Getenv("SOAK_FIGURES"); out != "" {
				if err := os.WriteFile(out, []byte(table), 0o644); err != nil {
					logf("write %s: %v", out, err)
					return 1
				}
				logf("figures written to %s", out)
			}
			return code
		},
	})
}
