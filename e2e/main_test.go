//go:build e2e

// Package e2e is the end-to-end suite: the shipped policies, bindings,
// configuration and webhook on a real apiserver, driven by the identities of
// a production install. `make e2e` runs it on a local control plane;
// E2E_PROVIDER=kubeconfig|kind runs it elsewhere (docs/e2e.md).
package e2e

import (
	"os"
	"testing"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/e2e/provider"
)

// env is the cluster every test runs against, set up once by TestMain.
var env *framework.Env

var logf = framework.StderrLogf("e2e")

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	p, err := provider.FromEnv(logf)
	if err != nil {
		logf("choose provider: %v", err)
		return 2
	}
	return framework.RunSuite(m, p, p.Name()+" provider", logf, framework.SuiteHooks{
		Ready: func(e *framework.Env) error { env = e; return nil },
	})
}
