// Command nodecluster manages the single-node cluster of the node e2e
// provider outside the test binary.
//
//	nodecluster cleanup   undo everything a node run left (works from the state directory alone)
//	nodecluster check     list what a node run left; exit 1 when anything is
//	nodecluster up        start the node (no bundle), print the kubeconfig, stop on Ctrl-C
//
// The state directory is <repo>/.dev/node unless -state says otherwise.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/e2e/node"
)

var logf = framework.StderrLogf("nodecluster")

func main() {
	root, err := framework.RepoRoot()
	if err != nil {
		logf("%v", err)
		os.Exit(2)
	}
	state := flag.String("state", filepath.Join(root, ".dev", "node"), "state directory of the node run")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: nodecluster [-state DIR] cleanup|check|up")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	switch flag.Arg(0) {
	case "cleanup":
		if err := node.Cleanup(*state, logf); err != nil {
			logf("cleanup: %v", err)
			os.Exit(1)
		}
		fallthrough
	case "check":
		if left := node.Check(*state); len(left) > 0 {
			for _, l := range left {
				logf("LEFT: %s", l)
			}
			os.Exit(1)
		}
		logf("check: clean (processes, cgroups, mounts, links, addresses, routes, iptables, sysctls, libcni cache, container log links, host directories)")
	case "up":
		bin := filepath.Join(root, "bin")
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		n, err := node.Start(ctx, node.Options{
			BinDir:   bin,
			StateDir: *state,
			Images:   existing(filepath.Join(bin, "pause-image.tar"), filepath.Join(bin, "webhook-image.tar")),
			Logf:     logf,
		})
		if err == nil {
			err = n.CP.StartControllerManager(ctx)
		}
		if err != nil {
			logf("up: %v", err)
			if n != nil {
				if serr := n.Stop(); serr != nil {
					logf("stop: %v", serr)
				}
			}
			os.Exit(1)
		}
		logf("node ready: export KUBECONFIG=%s; Ctrl-C stops and cleans up", n.CP.AdminKubeconfig())
		// From here the control plane's signal handler stops everything,
		// cleans the host (node.Options.OnInterrupt) and exits.
		select {}
	default:
		flag.Usage()
		os.Exit(2)
	}
}

func existing(paths ...string) []string {
	var out []string
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}
