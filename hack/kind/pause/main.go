// Command pause is the pod sandbox's init process: it holds the pod's
// namespaces open and reaps nothing else. The offline kind node image
// (hack/kind/node-image.sh) builds it from source and packs it as
// registry.k8s.io/pause, because a machine without a registry cannot pull
// the upstream one.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// The kubelet stops a sandbox with SIGTERM (then SIGKILL); as PID 1 the
	// default action for TERM/INT is ignored, so exit explicitly.
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	// PID 1 in the pod also inherits orphaned processes; reap them so a
	// container that double-forks cannot leave zombies in the sandbox.
	chld := make(chan os.Signal, 16)
	signal.Notify(chld, syscall.SIGCHLD)
	for {
		select {
		case <-ch:
			os.Exit(0)
		case <-chld:
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}
