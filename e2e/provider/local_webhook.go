package provider

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/sandbox-fence/sandbox-fence/e2e/cluster"
	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

// webhookProcessName is the name startWebhook gives the webhook process.
const webhookProcessName = "webhook"

// Component returns the newest tracked process named name: a restarted one
// is tracked again, so the newest is the live one (or the last one stopped).
func (l *Local) Component(name string) (*cluster.Process, error) {
	ps := l.CP.Processes()
	for i := len(ps) - 1; i >= 0; i-- {
		if ps[i].Name == name {
			return ps[i], nil
		}
	}
	return nil, fmt.Errorf("no %s process tracked by the local control plane", name)
}

// Restart starts a stopped component again with the same binary, command
// line (certificates, ports) and log file, tracked so teardown ends it.
func (l *Local) Restart(old *cluster.Process) (*cluster.Process, error) {
	if exited, _ := old.Exited(); !exited {
		return nil, fmt.Errorf("%s pid %d is still running; stop it first", old.Name, old.Pid)
	}
	// The webhook is built into the state directory; the control plane is
	// in bin/.
	bin := filepath.Join(l.BinDir, old.Name)
	if old.Name == webhookProcessName {
		bin = filepath.Join(l.StateDir, "bin", webhookProcessName)
	}
	p, err := cluster.StartProcess(old.Name, bin, old.Args, old.LogPath, l.Detached)
	if err != nil {
		return nil, err
	}
	l.CP.Track(p)
	return p, nil
}

// WaitWebhookReady polls the webhook's /readyz (from its
// --health-probe-bind-address) until it answers 200, which the webhook gives
// only once its TLS listener serves and its caches have synced, and returns
// when that was first seen. It gives up early when the process exits; an
// error carries the end of the webhook's log.
func WaitWebhookReady(ctx context.Context, p *cluster.Process, timeout time.Duration) (time.Time, error) {
	probe := p.Flag("health-probe-bind-address")
	if probe == "" {
		return time.Time{}, fmt.Errorf("webhook command line has no --health-probe-bind-address to poll")
	}
	readyz := "http://" + probe + "/readyz"
	hc := &http.Client{Timeout: 2 * time.Second}
	var at time.Time
	err := framework.Eventually(ctx, timeout, 20*time.Millisecond, "webhook /readyz", func(ctx context.Context) (bool, string, error) {
		if exited, werr := p.Exited(); exited {
			return false, "", fmt.Errorf("webhook exited (%v)", werr)
		}
		resp, err := hc.Get(readyz)
		if err != nil {
			return false, err.Error(), nil
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, resp.Status, nil
		}
		at = time.Now()
		return true, "", nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("%w; log ends with:\n%s", err, p.Tail(30))
	}
	return at, nil
}

// localWebhook is the local provider's framework.WebhookProcess: it stops
// and restarts only the webhook process, leaving etcd, kube-apiserver and
// the controller manager untouched, so an outage case observes the API
// server's own failurePolicy handling.
type localWebhook struct{ l *Local }

// Stop implements framework.WebhookProcess.
func (w localWebhook) Stop(ctx context.Context) error {
	p, err := w.l.Component(webhookProcessName)
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

// Start implements framework.WebhookProcess.
func (w localWebhook) Start(ctx context.Context) error {
	old, err := w.l.Component(webhookProcessName)
	if err != nil {
		return err
	}
	p, err := w.l.Restart(old)
	if err != nil {
		return err
	}
	if _, err := WaitWebhookReady(ctx, p, 2*time.Minute); err != nil {
		return err
	}
	w.l.Logf("local: webhook restarted as pid %d", p.Pid)
	return nil
}
