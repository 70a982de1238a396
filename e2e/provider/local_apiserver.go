package provider

import (
	"context"
	"fmt"
	"time"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

// localAPIServer is the local provider's framework.APIServerProcess: it
// restarts only kube-apiserver, with the same command line (certificates,
// ports, etcd), leaving etcd, the controller manager and the webhook
// running, as a rolling restart of one API server does.
type localAPIServer struct{ l *Local }

// Restart implements framework.APIServerProcess.
func (a localAPIServer) Restart(ctx context.Context) error {
	old, err := a.l.Component("kube-apiserver")
	if err != nil {
		return err
	}
	// kube-apiserver takes more than 15 s to drain on SIGTERM here; its
	// state is in etcd, so a short grace is enough for a restart.
	old.Stop(2 * time.Second)
	if exited, _ := old.Exited(); !exited {
		return fmt.Errorf("kube-apiserver pid %d did not exit", old.Pid)
	}
	p, err := a.l.Restart(old)
	if err != nil {
		return err
	}
	err = framework.Eventually(ctx, 3*time.Minute, 50*time.Millisecond, "kube-apiserver /readyz after a restart", func(ctx context.Context) (bool, string, error) {
		if exited, werr := p.Exited(); exited {
			return false, "", fmt.Errorf("kube-apiserver exited (%v); log ends with:\n%s", werr, p.Tail(30))
		}
		body, err := a.l.Env.Admin.Kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return false, err.Error() + " " + string(body), nil
		}
		return true, "", nil
	})
	if err != nil {
		return err
	}
	a.l.Logf("local: kube-apiserver restarted as pid %d", p.Pid)
	return nil
}
