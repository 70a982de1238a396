package provider

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sandbox-fence/sandbox-fence/e2e/cluster"
	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

// setEnforcement installs the bundle in mode as an admin would: it renders
// config/default with the mode's component (config/components/enforcement;
// none for deny), applies the policies, bindings and webhook configuration
// it yields, and restarts the webhook process with the --enforcement flag
// of the rendered Deployment, so the suite runs exactly what the component
// ships.
func (l *Local) setEnforcement(ctx context.Context, mode string) error {
	objs, err := framework.RenderMode(ctx, filepath.Join(l.BinDir, "kubectl"), l.RepoRoot, mode)
	if err != nil {
		return err
	}
	var apply []*unstructured.Unstructured
	flag := ""
	for _, o := range objs {
		switch o.GetKind() {
		case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			apply = append(apply, o)
		case "ValidatingWebhookConfiguration":
			if err := framework.PointWebhookAt(o, l.webhookBase, l.webhookCA); err != nil {
				return err
			}
			apply = append(apply, o)
		case "Deployment":
			flag = framework.EnforcementFlag(o)
		}
	}
	if flag == "" {
		flag = "--enforcement=deny"
	}
	for _, o := range apply {
		if err := l.Env.ReplaceSpec(ctx, o, nil); err != nil {
			return err
		}
	}
	_, err = l.RestartWebhookWith(ctx, flag)
	return err
}

// RestartWebhookWith stops the webhook process and starts it again with the
// same command line but flag (--name=value) in place of any --name, and
// returns the new process once it is ready.
func (l *Local) RestartWebhookWith(ctx context.Context, flag string) (*cluster.Process, error) {
	old, err := l.Component(webhookProcessName)
	if err != nil {
		return nil, err
	}
	old.Stop(5 * time.Second)
	if exited, _ := old.Exited(); !exited {
		return nil, fmt.Errorf("webhook pid %d did not exit", old.Pid)
	}
	name, _, _ := strings.Cut(flag, "=")
	var args []string
	for _, a := range old.Args {
		if a != name && !strings.HasPrefix(a, name+"=") {
			args = append(args, a)
		}
	}
	args = append(args, flag)
	p, err := cluster.StartProcess(old.Name, filepath.Join(l.StateDir, "bin", webhookProcessName), args, old.LogPath, l.Detached)
	if err != nil {
		return nil, err
	}
	l.CP.Track(p)
	if _, err := WaitWebhookReady(ctx, p, 2*time.Minute); err != nil {
		return nil, err
	}
	l.Logf("local: webhook restarted as pid %d with %s", p.Pid, flag)
	return p, nil
}
