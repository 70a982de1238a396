package main

import (
	"time"

	"github.com/sandbox-fence/sandbox-fence/e2e/cluster"
)

// metered are the processes whose CPU time is read around every window:
// user+system time from /proc/<pid>/stat.
// The bench's own clients are not among them.
var metered = []string{"kube-apiserver", "etcd", "webhook", "kyverno", "gatekeeper"}

// engineOf names the process that enforces a configuration besides the
// apiserver ("" when the apiserver alone does).
func engineOf(c config) string {
	switch {
	case c.Peer != "":
		return c.Peer
	case c.Webhook:
		return "webhook"
	}
	return ""
}

// meter reads the CPU time and RSS of the metered processes.
type meter struct {
	pids map[string]int
}

func newMeter(procs []*cluster.Process) meter {
	m := meter{pids: map[string]int{}}
	for _, p := range procs {
		for _, n := range metered {
			if p.Name == n {
				m.pids[n] = p.Pid // the newest process of a name wins
			}
		}
	}
	return m
}

// cpu returns each metered process's CPU time so far.
func (m meter) cpu() map[string]time.Duration {
	out := map[string]time.Duration{}
	for n, pid := range m.pids {
		if d, err := cluster.CPUTime(pid); err == nil {
			out[n] = d
		}
	}
	return out
}

// rssMiB returns each metered process's resident set size.
func (m meter) rssMiB() map[string]float64 {
	out := map[string]float64{}
	for n, pid := range m.pids {
		if v, err := cluster.RSSMiB(pid); err == nil {
			out[n] = v
		}
	}
	return out
}
