// Package peers runs the policy engines a cluster admin would pick instead of
// sandbox-fence — Kyverno and OPA Gatekeeper, built from the Go module proxy
// by hack/peers/build.sh — as local processes against the local control plane
// of e2e/cluster, the way the project's own webhook runs there: no images, no
// registry. Each carries the same fence written in its own language
// (e2e/bench/peers/<engine>/fence.yaml).
//
// The end-to-end suite runs its cases against an engine with
// E2E_ENFORCER=kyverno|gatekeeper (framework.Peer), and the interleaved bench
// switches between the engines and the shipped bundle within one run.
package peers

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/sandbox-fence/sandbox-fence/e2e/cluster"
	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

// Names of the engines, as E2E_ENFORCER and the bench's configurations
// spell them.
const (
	Kyverno    = "kyverno"
	Gatekeeper = "gatekeeper"
)

// Names lists the engines in report order.
var Names = []string{Kyverno, Gatekeeper}

// Engine is one peer engine: its process, the objects of its fence, and how
// its denials are recognised.
type Engine struct {
	// IP is the address the engine's webhook serves on and the API server
	// calls it at; nil is 127.0.0.1 (cluster.ServiceLikeIP says why the
	// bench sets another).
	IP net.IP

	name     string
	repoRoot string
	binDir   string
	logf     framework.Logf

	proc *cluster.Process
	// fence is what Enable applies and Disable deletes, in apply order.
	fence []*unstructured.Unstructured
	// vwc is Gatekeeper's webhook configuration (Kyverno manages its own).
	vwc *unstructured.Unstructured
}

// New returns the engine called name; Start runs it.
func New(name, repoRoot, binDir string, logf framework.Logf) (*Engine, error) {
	if name != Kyverno && name != Gatekeeper {
		return nil, fmt.Errorf("unknown peer engine %q: want %s or %s", name, Kyverno, Gatekeeper)
	}
	return &Engine{name: name, repoRoot: repoRoot, binDir: binDir, logf: logf}, nil
}

// Name implements framework.Peer.
func (e *Engine) Name() string { return e.name }

// Source implements framework.Peer: the substring of the webhook name the
// API server quotes in the engine's denials.
func (e *Engine) Source() string {
	if e.name == Kyverno {
		return "kyverno.svc"
	}
	return "validation.gatekeeper.sh"
}

// Version is the engine version built into bin/peers (hack/peers/build.sh).
func (e *Engine) Version() string {
	b, err := os.ReadFile(filepath.Join(e.binDir, "peers", "."+e.name+".version"))
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// Build runs hack/peers/build.sh for the named engines (a no-op when the
// binaries match their stamps).
func Build(ctx context.Context, repoRoot string, names ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot, "hack", "peers", "build.sh"), names...)
	cmd.Dir = repoRoot
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("hack/peers/build.sh %s: %w", strings.Join(names, " "), err)
	}
	return nil
}

// moduleDir is where the Go module cache holds the engine's source at the
// version built into bin/peers (its CRDs are read from there).
func (e *Engine) moduleDir(ctx context.Context) (string, error) {
	mod := "github.com/kyverno/kyverno"
	if e.name == Gatekeeper {
		mod = "github.com/open-policy-agent/gatekeeper/v3"
	}
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", mod+"@"+e.Version())
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s@%s (hack/peers/build.sh builds it): %w", mod, e.Version(), err)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		return "", fmt.Errorf("go mod download %s: no module directory (%v)", mod, err)
	}
	return m.Dir, nil
}

// crds reads the engine's CustomResourceDefinitions from its module.
func (e *Engine) crds(ctx context.Context) ([]*unstructured.Unstructured, error) {
	dir, err := e.moduleDir(ctx)
	if err != nil {
		return nil, err
	}
	var files []string
	if e.name == Kyverno {
		files, _ = filepath.Glob(filepath.Join(dir, "config", "crds", "*", "*.yaml"))
	} else {
		// The release manifest: every CRD Gatekeeper serves, the
		// ConstraintTemplate CRD included.
		files = []string{filepath.Join(dir, "deploy", "gatekeeper.yaml")}
	}
	var out []*unstructured.Unstructured
	for _, f := range files {
		objs, err := framework.ReadYAMLFile(f)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			if o.GetKind() == "CustomResourceDefinition" {
				out = append(out, o)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no CRDs found in %s", dir)
	}
	return out, nil
}

// Start installs the engine's CRDs, namespace, ServiceAccount and RBAC,
// starts its process as that ServiceAccount and waits until it serves. Its
// fence is not yet enforced: Enable does that.
func (e *Engine) Start(ctx context.Context, env *framework.Env, cp *cluster.ControlPlane) error {
	start := time.Now()
	bin := filepath.Join(e.binDir, "peers", e.name)
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%s is not built (run hack/peers/build.sh %s): %w", bin, e.name, err)
	}
	crds, err := e.crds(ctx)
	if err != nil {
		return err
	}
	if err := env.InstallCRDs(ctx, crds); err != nil {
		return err
	}
	kubeconfig, err := e.identity(ctx, env, cp)
	if err != nil {
		return err
	}
	fence, err := framework.ReadYAMLFile(filepath.Join(e.repoRoot, "e2e", "bench", "peers", e.name, "fence.yaml"))
	if err != nil {
		return err
	}
	e.fence = fence

	port, err := cluster.FreePort()
	if err != nil {
		return err
	}
	probe, err := cluster.FreePort()
	if err != nil {
		return err
	}
	ip := e.IP
	if ip == nil {
		ip = net.ParseIP("127.0.0.1")
	}
	host := net.JoinHostPort(ip.String(), strconv.Itoa(port))
	var args, procEnv []string
	var ready func(context.Context) (bool, string, error)
	switch e.name {
	case Kyverno:
		// Out of cluster as Kyverno's own developer setup runs it: with
		// --serverIP its certificate controller issues a serving
		// certificate for that address and its webhook controller writes
		// URL webhooks pointing at it. Admission reports are off: the
		// reports controller that would aggregate and prune them is not
		// part of the fence (they would pile up in etcd without it).
		args = []string{
			"--kubeconfig=" + kubeconfig,
			"--serverIP=" + host,
			"--webhookServerHost=" + ip.String(),
			fmt.Sprintf("--webhookServerPort=%d", port),
			"--caSecretName=kyverno-svc.kyverno.svc.kyverno-tls-ca",
			"--tlsSecretName=kyverno-svc.kyverno.svc.kyverno-tls-pair",
			"--admissionReports=false",
			"--omitEvents=PolicyApplied,PolicySkipped",
			"--metricsHost=127.0.0.1",
			fmt.Sprintf("--metricsPort=%d", probe),
			"--controllerRuntimeMetricsAddress=0",
			// The default client limit (20 requests/s) would throttle the
			// owner lookups of resource.Get above 20 policy writes a second:
			// the peer at its best, not as shipped.
			"--clientRateLimitQPS=1000",
			"--clientRateLimitBurst=2000",
			"--disableLogColor",
		}
		// What its Deployment sets from the downward API; it refuses to
		// start without them (cmd/internal/check.go).
		procEnv = []string{
			"KYVERNO_NAMESPACE=kyverno", "KYVERNO_SERVICEACCOUNT_NAME=kyverno-admission-controller",
			"KYVERNO_DEPLOYMENT=kyverno-admission-controller", "KYVERNO_POD_NAME=kyverno-local",
			"KYVERNO_SVC=kyverno-svc", "INIT_CONFIG=kyverno", "METRICS_CONFIG=kyverno-metrics",
		}
		hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a liveness poll of our own child process; admission traffic verifies the CA
		ready = func(ctx context.Context) (bool, string, error) {
			resp, err := hc.Get("https://" + host + "/health/readiness")
			if err != nil {
				return false, err.Error(), nil
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, resp.Status, nil
		}
	case Gatekeeper:
		ca, err := cluster.NewCA("gatekeeper-ca")
		if err != nil {
			return err
		}
		serving, err := ca.Serving("gatekeeper-webhook-service.gatekeeper-system.svc", []string{"localhost"}, []net.IP{ip})
		if err != nil {
			return err
		}
		certDir := filepath.Join(cp.StateDir(), "gatekeeper-certs")
		if err := cluster.WritePair(certDir, "tls", serving); err != nil {
			return err
		}
		// The webhook operation (no audit, status or mutation), one replica,
		// plus generate: the operation that creates each template's
		// constraint CRD (the release runs it in the audit pod). Its own
		// certificate rotation is off; the configuration below carries our
		// CA, as the shipped webhook's local run does.
		args = []string{
			"--kubeconfig=" + kubeconfig,
			"--operation=webhook",
			"--operation=generate",
			// Its out-of-cluster switch: status objects name a fake pod
			// instead of reading its own Pod (POD_NAME) from the API.
			"--debug-use-fake-pod",
			"--host=" + ip.String(),
			fmt.Sprintf("--port=%d", port),
			"--cert-dir=" + certDir,
			"--disable-cert-rotation",
			fmt.Sprintf("--health-addr=127.0.0.1:%d", probe),
			"--metrics-addr=0",
			"--shutdown-delay=0",
			"--disable-opa-builtin=http.send",
			"--log-level=WARNING",
		}
		e.vwc = gatekeeperWebhookConfig(host, ca.CertPEM)
		hc := &http.Client{Timeout: 2 * time.Second}
		ready = func(ctx context.Context) (bool, string, error) {
			resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", probe))
			if err != nil {
				return false, err.Error(), nil
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, resp.Status, nil
		}
	}
	p, err := cluster.StartProcessEnv(e.name, bin, args, procEnv, filepath.Join(cp.LogDir(), e.name+".log"), false)
	if err != nil {
		return err
	}
	cp.Track(p)
	e.proc = p
	err = framework.Eventually(ctx, 3*time.Minute, 100*time.Millisecond, e.name+" ready", func(ctx context.Context) (bool, string, error) {
		if exited, werr := p.Exited(); exited {
			return false, "", fmt.Errorf("%s exited (%v)", e.name, werr)
		}
		return ready(ctx)
	})
	if err != nil {
		return fmt.Errorf("%w; log ends with:\n%s", err, p.Tail(40))
	}
	e.logf("peers: %s %s serving on %s (pid %d) after %s", e.name, e.Version(), host, p.Pid, time.Since(start).Round(100*time.Millisecond))
	return nil
}

// Enable applies the engine's fence (for Gatekeeper also its webhook
// configuration) and waits until every marker is denied by the engine.
func (e *Engine) Enable(ctx context.Context, env *framework.Env) error {
	if err := e.apply(ctx, env); err != nil {
		return err
	}
	ms, err := e.Markers(env)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if err := env.WaitDenied(ctx, m, 3*time.Minute); err != nil {
			return fmt.Errorf("%s: %w; log ends with:\n%s", e.name, err, e.proc.Tail(20))
		}
	}
	return nil
}

// apply creates the fence objects. A Gatekeeper constraint can only be
// created once its template's CRD exists, so a failed apply is retried
// until everything is in.
func (e *Engine) apply(ctx context.Context, env *framework.Env) error {
	objs := append([]*unstructured.Unstructured{}, e.fence...)
	if e.vwc != nil {
		objs = append(objs, e.vwc)
	}
	return framework.Eventually(ctx, 2*time.Minute, 250*time.Millisecond, e.name+" fence applied", func(ctx context.Context) (bool, string, error) {
		if err := env.Apply(ctx, objs, framework.ApplyOptions{}); err != nil {
			if m, merr := env.Mapper(); merr == nil {
				m.Reset()
			}
			return false, err.Error(), nil
		}
		return true, "", nil
	})
}

// Disable takes the engine's enforcement away: Kyverno's policies are
// deleted (its webhook controller then drops their webhook rules), and
// Gatekeeper's webhook configuration is (its templates and constraints stay,
// as the shipped policies stay without their bindings).
func (e *Engine) Disable(ctx context.Context, env *framework.Env) error {
	var objs []*unstructured.Unstructured
	if e.vwc != nil {
		objs = []*unstructured.Unstructured{e.vwc}
	} else {
		for _, o := range e.fence {
			if o.GetKind() == "ValidatingPolicy" {
				objs = append(objs, o)
			}
		}
	}
	mapper, err := env.Mapper()
	if err != nil {
		return err
	}
	for _, o := range objs {
		ri, err := framework.ResourceFor(mapper, env.Admin.Dynamic, o)
		if err != nil {
			return err
		}
		if err := ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("%s: delete %s %s: %w", e.name, o.GetKind(), o.GetName(), err)
		}
	}
	return nil
}

// Markers are the shipped markers (framework.Env.Markers) aimed at this
// engine: the same dry-run writes, each denied by the engine's webhook.
func (e *Engine) Markers(env *framework.Env) ([]framework.Marker, error) {
	epoch := env.HolderEpochMarker()
	epoch.Name, epoch.Want = e.name+" holder-epoch", e.Source()
	unprefixed, err := env.PerSandboxPolicy("SandboxClaim", "marker", string(uuid.NewUUID()), []string{"example.com"})
	if err != nil {
		return nil, err
	}
	unprefixed.SetName("marker-without-prefix")
	missingOwner, err := env.PerSandboxPolicy("SandboxClaim", "marker-missing-owner", string(uuid.NewUUID()), []string{"example.com"})
	if err != nil {
		return nil, err
	}
	return []framework.Marker{
		epoch,
		{Name: e.name + " cilium-egress", As: env.Host, Obj: unprefixed, Want: e.Source()},
		{Name: e.name + " owner", As: env.Host, Obj: missingOwner, Want: e.Source()},
	}, nil
}

// holderEpochRule is the object that carries the engine's holder-epoch rule.
func (e *Engine) holderEpochRule() (*unstructured.Unstructured, error) {
	kind := "ValidatingPolicy"
	if e.name == Gatekeeper {
		kind = "SandboxFenceHolderEpoch"
	}
	for _, o := range e.fence {
		if o.GetKind() == kind && o.GetName() == framework.PolicyHolderEpoch {
			return o, nil
		}
	}
	return nil, fmt.Errorf("%s fence has no %s %s", e.name, kind, framework.PolicyHolderEpoch)
}

// WithoutHolderEpoch implements framework.Peer: the engine's holder-epoch
// rule is deleted while fn seeds what it forbids, then re-applied.
func (e *Engine) WithoutHolderEpoch(ctx context.Context, env *framework.Env, fn func() error) (err error) {
	rule, err := e.holderEpochRule()
	if err != nil {
		return err
	}
	mapper, err := env.Mapper()
	if err != nil {
		return err
	}
	ri, err := framework.ResourceFor(mapper, env.Admin.Dynamic, rule)
	if err != nil {
		return err
	}
	if err := ri.Delete(ctx, rule.GetName(), metav1.DeleteOptions{}); err != nil {
		return err
	}
	marker := env.HolderEpochMarker()
	marker.Want = e.Source()
	defer func() {
		bg := context.WithoutCancel(ctx)
		if aerr := env.Apply(bg, []*unstructured.Unstructured{rule}, framework.ApplyOptions{}); aerr != nil {
			err = errors.Join(err, aerr)
			return
		}
		err = errors.Join(err, env.WaitDenied(bg, marker, 3*time.Minute))
	}()
	if err := env.WaitAdmitted(ctx, marker, 3*time.Minute); err != nil {
		return err
	}
	return fn()
}
