// Command kubectl-fence is the kubectl plugin of sandbox-fence
// (docs/kubectl-fence.md): `kubectl fence audit` reports what the installed
// fence would refuse among the objects that already exist, `kubectl fence
// status SANDBOX` shows one Sandbox's fencing state, and `kubectl fence
// check` verifies an installation. Install it with
//
//	go install github.com/sandbox-fence/sandbox-fence/cmd/kubectl-fence@latest
//
// and kubectl finds it on $PATH. It is wiring only; what the commands do is
// internal/fencectl. Exit codes: 0 clean, 1 findings (audit) or failed
// checks (check), 2 the command could not run.
package main

import (
	"os"

	"github.com/sandbox-fence/sandbox-fence/internal/fencectl"
)

func main() {
	fencectl.QuietKlog()
	streams := fencectl.Streams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	os.Exit(fencectl.ExitCode(fencectl.NewCommand(streams).Execute(), os.Stderr))
}
