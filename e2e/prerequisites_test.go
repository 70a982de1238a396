//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/sandbox-fence/sandbox-fence/e2e/cluster"
	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

// The webhook started on a cluster without the CRDs it needs stays alive
// and not ready, and its /readyz names each missing kind; once the CRDs are
// installed it becomes ready by itself, without a restart (docs/install.md,
// Prerequisites). Before, it exited and crash-looped behind a fail-closed
// webhook. This runs the webhook binary against a control plane of its own
// (etcd and kube-apiserver only, nothing installed), not the suite's.
func TestTheWebhookStartsWithoutItsCRDsAndSaysSo(t *testing.T) {
	ctx := testContext(t)
	root := repoRoot(t)
	binDir, _, err := framework.ControlPlane(root)
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	cp, err := cluster.Start(ctx, cluster.Options{BinDir: binDir, StateDir: state, NoSignalHandler: true, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)

	bin := filepath.Join(state, "webhook")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/webhook")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/webhook: %v\n%s", err, out)
	}
	ca, err := cluster.NewCA("prerequisites-ca")
	if err != nil {
		t.Fatal(err)
	}
	serving, err := ca.Serving("sandbox-fence-webhook", []string{"localhost"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	certDir := filepath.Join(state, "certs")
	if err := cluster.WritePair(certDir, "tls", serving); err != nil {
		t.Fatal(err)
	}
	ports := make([]int, 2)
	for i := range ports {
		if ports[i], err = cluster.FreePort(); err != nil {
			t.Fatal(err)
		}
	}
	p, err := cluster.StartProcess("webhook", bin, []string{
		"--kubeconfig=" + cp.AdminKubeconfig(),
		"--cert-dir=" + certDir,
		"--port=" + strconv.Itoa(ports[0]),
		"--bind-address=127.0.0.1",
		"--metrics-bind-address=0",
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(ports[1]),
		"--cert-rotation=false",
	}, filepath.Join(state, "webhook.log"), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(10 * time.Second) })
	probe := func(path string) (int, string) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", ports[1], path))
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	// Polled until it answers, then held to what it says.
	waitProbe := func(want int, timeout time.Duration) string {
		t.Helper()
		var code int
		var body string
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
			if exited, err := p.Exited(); exited {
				return false, fmt.Errorf("the webhook exited (%v):\n%s", err, p.Tail(20))
			}
			code, body = probe("/readyz")
			return code == want, nil
		})
		if err != nil {
			t.Fatalf("/readyz: want %d, last %d %q: %v\n%s", want, code, body, err, p.Tail(20))
		}
		return body
	}

	body := waitProbe(http.StatusServiceUnavailable, time.Minute)
	for _, kind := range []string{"Sandbox agents.x-k8s.io/v1beta1", "SandboxClaim extensions.agents.x-k8s.io/v1beta1", "FenceConfig fence.sandbox.namzu.ai/v1alpha1", "CiliumNetworkPolicy cilium.io/v2"} {
		if !strings.Contains(body, kind) {
			t.Errorf("/readyz does not name %s: %q", kind, body)
		}
	}
	if code, body := probe("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while waiting: %d %q, want 200 (alive: a restart would not help)", code, body)
	}
	t.Logf("without its CRDs: /readyz %q", body)

	crds, err := framework.CRDs(ctx, root, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := framework.NewIdentity(framework.ContextAdmin, "admin", []string{"system:masters"}, cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	fresh := &framework.Env{Provider: "prerequisites", Admin: admin}
	if err := fresh.InstallCRDs(ctx, crds); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitProbe(http.StatusOK, 2*time.Minute)
	t.Logf("ready %s after the CRDs were applied, in the same process", time.Since(start).Round(100*time.Millisecond))
}
