//go:build e2e

package e2e

import (
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	fencev1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/e2e/cluster"
	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/e2e/provider"
)

// The install, prerequisite and uninstall cases each need a cluster the
// bundle is not (yet) installed on, so they start a control plane of their
// own from the same binaries as the local provider, next to the suite's.
// Only the local provider has those binaries and may start processes.

// freshCluster is a control plane started for one test, stopped with it.
type freshCluster struct {
	cp   *cluster.ControlPlane
	env  *framework.Env
	root string
	dir  string
}

func requireLocal(t *testing.T) {
	t.Helper()
	if env.Provider != "local" {
		t.Skipf("starts a control plane of its own from bin/, which only the local provider does (provider %s)", env.Provider)
	}
}

// freshContext bounds a fresh-cluster case: longer than testContext, since
// it starts a control plane and builds the webhook on a shared machine.
func freshContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func newFreshCluster(t *testing.T, withControllerManager bool) *freshCluster {
	t.Helper()
	requireLocal(t)
	ctx := freshContext(t)
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin, _, err := framework.ControlPlane(root)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cp, err := cluster.Start(ctx, cluster.Options{BinDir: bin, StateDir: dir, NoSignalHandler: true, Logf: func(f string, a ...any) { t.Logf("fresh cluster: "+f, a...) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("fresh cluster logs:\n%s", cp.DumpLogs(filepath.Join(dir, "logs-copy"), 30))
		}
		cp.Stop()
	})
	admin, err := framework.NewIdentity(framework.ContextAdmin, "admin", []string{"system:masters"}, cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	fc := &freshCluster{cp: cp, env: &framework.Env{Provider: "local", Admin: admin}, root: root, dir: dir}
	if err := fc.env.CheckServerVersion(ctx, "", logf); err != nil {
		t.Fatal(err)
	}
	if withControllerManager {
		if err := cp.StartControllerManager(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return fc
}

// crds returns the suite's CRDs of the given API groups.
func (fc *freshCluster) crds(t *testing.T, groups ...string) []*unstructured.Unstructured {
	t.Helper()
	all, err := framework.CRDs(freshContext(t), fc.root, logf)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, g := range groups {
		want[g] = true
	}
	var out []*unstructured.Unstructured
	for _, c := range all {
		g, _, _ := unstructured.NestedString(c.Object, "spec", "group")
		if want[g] {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no CRD of groups %v", groups)
	}
	return out
}

// buildWebhook builds cmd/webhook into the test's directory (the Go build
// cache makes it a link after the provider's build).
func buildWebhook(t *testing.T, root string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "webhook")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/webhook")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/webhook: %v\n%s", err, out)
	}
	return bin
}

// localWebhook is a webhook process serving on loopback with a certificate
// of its own CA, as the local provider runs it.
type localWebhook struct {
	proc             *cluster.Process
	base             string // https://127.0.0.1:<port>
	ca               []byte
	probe            string // 127.0.0.1:<port>
	port, probePort  int
	metricsPort      int
	certDir, logPath string
	kubeconfig, bin  string
	args             []string
	stopOnce         sync.Once
	t                *testing.T
}

// newLocalWebhook prepares (does not start) a webhook for fc with cfg's
// credentials.
func (fc *freshCluster) newLocalWebhook(t *testing.T, name string, cfg *rest.Config, extraArgs ...string) *localWebhook {
	t.Helper()
	ca, err := cluster.NewCA("sandbox-fence-webhook-ca-" + name)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := ca.Serving("sandbox-fence-webhook", []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	w := &localWebhook{ca: ca.CertPEM, t: t, bin: buildWebhook(t, fc.root)}
	w.certDir = filepath.Join(fc.dir, name+"-certs")
	if err := cluster.WritePair(w.certDir, "tls", serving); err != nil {
		t.Fatal(err)
	}
	w.kubeconfig = filepath.Join(fc.dir, name+".kubeconfig")
	if err := cluster.WriteKubeconfig(w.kubeconfig, map[string]*rest.Config{"webhook": cfg}, "webhook"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*int{&w.port, &w.probePort, &w.metricsPort} {
		if *p, err = cluster.FreePort(); err != nil {
			t.Fatal(err)
		}
	}
	w.base = "https://127.0.0.1:" + strconv.Itoa(w.port)
	w.probe = "127.0.0.1:" + strconv.Itoa(w.probePort)
	w.logPath = filepath.Join(fc.dir, name+".log")
	w.args = append([]string{
		"--kubeconfig=" + w.kubeconfig,
		"--cert-dir=" + w.certDir,
		"--port=" + strconv.Itoa(w.port),
		"--bind-address=127.0.0.1",
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(w.metricsPort),
		"--health-probe-bind-address=" + w.probe,
		"--cert-rotation=false",
		"--namespace=" + framework.WebhookNamespace,
		"--config-name=" + fencev1.DefaultConfigName,
	}, extraArgs...)
	return w
}

// setCredentials rewrites the kubeconfig the process starts with.
func (w *localWebhook) setCredentials(cfg *rest.Config) {
	w.t.Helper()
	if err := cluster.WriteKubeconfig(w.kubeconfig, map[string]*rest.Config{"webhook": cfg}, "webhook"); err != nil {
		w.t.Fatal(err)
	}
}

func (w *localWebhook) start() {
	w.t.Helper()
	p, err := cluster.StartProcess("webhook", w.bin, w.args, w.logPath, false)
	if err != nil {
		w.t.Fatal(err)
	}
	w.proc = p
	w.t.Cleanup(w.stop)
}

func (w *localWebhook) waitReady(ctx context.Context) error {
	_, err := provider.WaitWebhookReady(ctx, w.proc, 2*time.Minute)
	return err
}

func (w *localWebhook) stop() {
	w.stopOnce.Do(func() {
		if w.proc != nil {
			w.proc.Stop(5 * time.Second)
		}
	})
}

// pointAt rewrites copies of the webhook configurations to this process.
func (w *localWebhook) pointAt(vwcs []*unstructured.Unstructured) []*unstructured.Unstructured {
	w.t.Helper()
	var out []*unstructured.Unstructured
	for _, v := range vwcs {
		c := v.DeepCopy()
		if err := framework.PointWebhookAt(c, w.base, w.ca); err != nil {
			w.t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}
