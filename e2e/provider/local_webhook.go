package provider

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandbox-fence/sandbox-fence/e2e/cluster"
	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

// webhookProcessName is the name startWebhook gives the webhook process.
const webhookProcessName = "webhook"

// localWebhook is the local provider's framework.WebhookProcess: it stops
// and restarts only the webhook process, leaving etcd, kube-apiserver and
// the controller manager untouched, so an outage case observes the API
// server's own failurePolicy handling.
type localWebhook struct{ l *Local }

// current is the newest tracked webhook process: a restarted one is tracked
// again, so the newest is the live one (or the last one stopped).
func (w localWebhook) current() (*cluster.Process, error) {
	ps := w.l.CP.Processes()
	for i := len(ps) - 1; i >= 0; i-- {
		if ps[i].Name == webhookProcessName {
			return ps[i], nil
		}
	}
	return nil, fmt.Errorf("no %s process tracked by the local control plane", webhookProcessName)
}

// Stop implements framework.WebhookProcess.
func (w localWebhook) Stop(ctx context.Context) error {
	p, err := w.current()
	if err != nil {
		return err
	}
	p.Stop(5 * time.Second)
	if exited, _ := p.Exited(); !exited {
		return fmt.Errorf("webhook pid %d did not exit", p.Pid)
	}
	w.l.Logf("local: webhook pid %d stopped", p.Pid)
	return nil
}

// Start implements framework.WebhookProcess: the same binary, flags
// (certificate directory, ports) and log file as the stopped process.
func (w localWebhook) Start(ctx context.Context) error {
	old, err := w.current()
	if err != nil {
		return err
	}
	if exited, _ := old.Exited(); !exited {
		return fmt.Errorf("webhook pid %d is still running; Stop it first", old.Pid)
	}
	bin := filepath.Join(w.l.StateDir, "bin", "webhook")
	p, err := cluster.StartProcess(old.Name, bin, old.Args, old.LogPath, w.l.Detached)
	if err != nil {
		return err
	}
	w.l.CP.Track(p)
	probe := argValue(old.Args, "--health-probe-bind-address")
	if probe == "" {
		return fmt.Errorf("webhook command line has no --health-probe-bind-address to poll")
	}
	if err := waitWebhookReady(ctx, p, probe, "restarted webhook ready"); err != nil {
		return err
	}
	w.l.Logf("local: webhook restarted as pid %d", p.Pid)
	return nil
}

func argValue(args []string, flag string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// waitWebhookReady polls the webhook's /readyz on probeAddr (host:port) until
// it answers 200, which the webhook gives only once its TLS listener serves
// and its caches have synced; it gives up early when the process exits.
func waitWebhookReady(ctx context.Context, p *cluster.Process, probeAddr, what string) error {
	readyz := "http://" + probeAddr + "/readyz"
	hc := &http.Client{Timeout: 2 * time.Second}
	return framework.Eventually(ctx, 2*time.Minute, 100*time.Millisecond, what, func(ctx context.Context) (bool, string, error) {
		if exited, werr := p.Exited(); exited {
			return false, "", fmt.Errorf("webhook exited (%v); log ends with:\n%s", werr, p.Tail(30))
		}
		resp, err := hc.Get(readyz)
		if err != nil {
			return false, err.Error(), nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status, nil
	})
}
