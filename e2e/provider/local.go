package provider

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fencev1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/e2e/cluster"
	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

// Local runs the control plane from bin/ as child processes and the webhook
// as a local process behind a URL-based webhook configuration.
type Local struct {
	RepoRoot string
	// BinDir holds etcd, kube-apiserver, kube-controller-manager and
	// kubectl: framework.ControlPlane says which.
	BinDir string
	// KubernetesVersion is the release of BinDir; the server must report it.
	KubernetesVersion string
	StateDir          string
	// RemoveState deletes StateDir on a successful teardown.
	RemoveState bool
	// Detached leaves the processes running after this process exits
	// (devcluster up).
	Detached bool
	// NoSignalHandler: see cluster.Options.
	NoSignalHandler bool
	// WebhookIP is the address the webhook serves on and the API server
	// calls it at; nil is 127.0.0.1 (cluster.ServiceLikeIP says why the
	// bench sets another).
	WebhookIP net.IP
	// ExtraAPIServerArgs are passed to kube-apiserver (cluster.Options):
	// the bench turns profiling on with them.
	ExtraAPIServerArgs []string
	// ExtraWebhookArgs are appended to the webhook's command line
	// ($E2E_WEBHOOK_ARGS): the suite runs against an option that is not the
	// default, e.g. --owner-cache-first=false.
	ExtraWebhookArgs []string
	// Enforcer is "" for the shipped bundle, or a peer engine
	// (framework.EnvEnforcer) that replaces its bindings and webhook.
	Enforcer string
	Logf     framework.Logf

	CP  *cluster.ControlPlane
	Env *framework.Env

	// webhookBase and webhookCA are where the webhook process serves and
	// the CA of its certificate.
	webhookBase string
	webhookCA   []byte
}

// Name implements Provider.
func (l *Local) Name() string { return "local" }

// Setup implements Provider: control plane, CRDs, controller manager,
// identities, bundle, FenceConfig, webhook, then the enforcement markers.
func (l *Local) Setup(ctx context.Context) (*framework.Env, error) {
	start := time.Now()
	cp, err := cluster.Start(ctx, cluster.Options{BinDir: l.BinDir, StateDir: l.StateDir, Detached: l.Detached, NoSignalHandler: l.NoSignalHandler, Logf: l.Logf, ExtraAPIServerArgs: l.ExtraAPIServerArgs})
	if err != nil {
		return nil, err
	}
	l.CP = cp
	admin, err := framework.NewIdentity(framework.ContextAdmin, "admin", []string{"system:masters"}, cp.AdminConfig())
	if err != nil {
		return nil, err
	}
	env := &framework.Env{Provider: l.Name(), Admin: admin}
	l.Env = env
	if err := env.CheckServerVersion(ctx, l.KubernetesVersion, l.Logf); err != nil {
		return nil, err
	}

	crds, err := framework.CRDs(ctx, l.RepoRoot, l.Logf)
	if err != nil {
		return nil, err
	}
	bundle, err := framework.RenderBundle(ctx, filepath.Join(l.BinDir, "kubectl"), l.RepoRoot, l.Logf)
	if err != nil {
		return nil, err
	}
	bundleCRDs, vwcs, objs := bundle.Split()
	if err := env.InstallCRDs(ctx, append(crds, bundleCRDs...)); err != nil {
		return nil, err
	}
	// After the CRDs: the garbage collector's first discovery then sees them.
	if err := cp.StartControllerManager(ctx); err != nil {
		return nil, err
	}
	if err := env.SetupIdentities(ctx, cp.UserConfig); err != nil {
		return nil, err
	}

	var keep []*unstructured.Unstructured
	for _, o := range objs {
		// No kubelet runs here: the webhook runs as a local process instead.
		if o.GetKind() == "Deployment" {
			l.Logf("local: not applying Deployment %s/%s (no kubelet); the webhook runs as a local process", o.GetNamespace(), o.GetName())
			continue
		}
		keep = append(keep, o)
	}
	if err := env.Apply(ctx, keep, framework.ApplyOptions{}); err != nil {
		return nil, err
	}
	if err := env.ConfigureFence(ctx, fencev1.DefaultConfigName); err != nil {
		return nil, err
	}
	if err := env.InstallBaseline(ctx, l.RepoRoot); err != nil {
		return nil, err
	}
	if err := l.startWebhook(ctx, vwcs); err != nil {
		return nil, err
	}
	env.ConversionServed, err = framework.ConversionServed(ctx, env)
	if err != nil {
		return nil, err
	}
	if err := env.WaitForEnforcement(ctx, l.Logf); err != nil {
		return nil, err
	}
	if l.Enforcer != "" && l.Enforcer != framework.ShippedEnforcer {
		if err := l.usePeer(ctx); err != nil {
			return nil, err
		}
	}
	l.Logf("local: environment ready in %s (state %s)", time.Since(start).Round(100*time.Millisecond), l.StateDir)
	return env, nil
}

func (l *Local) startWebhook(ctx context.Context, vwcs []*unstructured.Unstructured) error {
	bin := filepath.Join(l.StateDir, "bin", "webhook")
	l.Logf("local: building the webhook (go build ./cmd/webhook)")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/webhook")
	build.Dir = l.RepoRoot
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/webhook: %v\n%s", err, out)
	}

	ca, err := cluster.NewCA("sandbox-fence-webhook-ca")
	if err != nil {
		return err
	}
	ip := l.WebhookIP
	if ip == nil {
		ip = net.ParseIP("127.0.0.1")
	}
	// The metrics endpoint, on loopback, serves the same certificate.
	serving, err := ca.Serving("sandbox-fence-webhook", []string{"localhost"}, []net.IP{ip, net.ParseIP("127.0.0.1")})
	if err != nil {
		return err
	}
	certDir := filepath.Join(l.StateDir, "webhook-certs")
	if err := cluster.WritePair(certDir, "tls", serving); err != nil {
		return err
	}
	kubeconfig, err := l.webhookKubeconfig(ctx)
	if err != nil {
		return err
	}
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = cluster.FreePort(); err != nil {
			return err
		}
	}
	p, err := cluster.StartProcess("webhook", bin, append([]string{
		"--kubeconfig=" + kubeconfig,
		"--cert-dir=" + certDir,
		"--port=" + strconv.Itoa(ports[0]),
		"--bind-address=" + ip.String(),
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(ports[1]),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(ports[2]),
		"--cert-rotation=false",
		"--config-name=" + fencev1.DefaultConfigName,
	}, l.ExtraWebhookArgs...), filepath.Join(l.CP.LogDir(), "webhook.log"), l.Detached)
	if err != nil {
		return err
	}
	l.CP.Track(p)
	if _, err := WaitWebhookReady(ctx, p, 2*time.Minute); err != nil {
		return err
	}
	base := "https://" + net.JoinHostPort(ip.String(), strconv.Itoa(ports[0]))
	l.webhookBase, l.webhookCA = base, ca.CertPEM
	for _, vwc := range vwcs {
		if err := framework.PointWebhookAt(vwc, base, ca.CertPEM); err != nil {
			return err
		}
	}
	if err := l.Env.Apply(ctx, vwcs, framework.ApplyOptions{}); err != nil {
		return err
	}
	l.Env.WebhookInstalled = true
	l.Env.WebhookProcess = localWebhook{l: l}
	l.Env.APIServerProcess = localAPIServer{l: l}
	l.Env.WebhookMetrics = framework.FixedMetrics{{Replica: "process", URL: "https://127.0.0.1:" + strconv.Itoa(ports[1]) + "/metrics", CA: ca.CertPEM}}
	l.Env.SetEnforcement = l.setEnforcement
	extra := ""
	if len(l.ExtraWebhookArgs) > 0 {
		extra = " with " + strings.Join(l.ExtraWebhookArgs, " ")
	}
	l.Logf("local: webhook serving on %s%s", base, extra)
	return nil
}

// webhookKubeconfig gives the local webhook the credentials it has in
// production: a token of its ServiceAccount, bound by the shipped RBAC.
func (l *Local) webhookKubeconfig(ctx context.Context) (string, error) {
	path := filepath.Join(l.StateDir, "webhook.kubeconfig")
	// No fallback to admin: the webhook must run under the shipped RBAC, or
	// a missing permission would never show here.
	if err := l.CP.WriteServiceAccountKubeconfig(ctx, l.Env.Admin.Kube, framework.WebhookNamespace, framework.WebhookName, path); err != nil {
		return "", fmt.Errorf("%w (shipped in config/webhook)", err)
	}
	return path, nil
}

// Teardown implements Provider.
func (l *Local) Teardown(_ context.Context, failed bool, artifactDir string) error {
	if l.CP == nil {
		return nil
	}
	if failed {
		dir := artifactDir
		if dir == "" {
			dir = filepath.Join(l.StateDir, "logs")
		}
		fmt.Fprintf(os.Stderr, "local control plane logs (copied to %s):\n%s", dir, l.CP.DumpLogs(dir, 40))
	}
	l.CP.Stop()
	if l.RemoveState && !failed {
		return os.RemoveAll(l.StateDir)
	}
	fmt.Fprintf(os.Stderr, "local control plane state kept in %s\n", l.StateDir)
	return nil
}
