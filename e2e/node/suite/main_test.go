//go:build e2e_node

// Package suite holds what only the node provider can show: the webhook
// running in-cluster behind its Service, surviving a rolling restart and the
// loss of a replica without one failed admission, and cert-controller
// rotating its certificate end to end. `make test-node` runs it after the
// shared suite; with any other provider it has nothing to run on.
package suite

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/e2e/node"
)

var (
	env      *framework.Env
	provider *node.Provider
)

var logf = framework.StderrLogf("node-e2e")

func TestMain(m *testing.M) {
	if p := os.Getenv("E2E_PROVIDER"); p != "node" {
		// The e2e_node tag asks for this suite; without its provider nothing
		// could run, and that must not read as a pass.
		fmt.Fprintf(os.Stderr, "node-only suite: E2E_PROVIDER=%q; it needs E2E_PROVIDER=node (make test-node)\n", p)
		os.Exit(2)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	root, err := framework.RepoRoot()
	if err != nil {
		logf("%v", err)
		return 2
	}
	provider = node.NewProvider(root, filepath.Join(root, "bin"), logf)
	return framework.RunSuite(m, provider, "node provider", logf, framework.SuiteHooks{
		Ready: func(e *framework.Env) error { env = e; return nil },
	})
}
