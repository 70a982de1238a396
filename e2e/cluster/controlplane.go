// Package cluster runs a local Kubernetes control plane (etcd,
// kube-apiserver, kube-controller-manager) as child processes on free loopback
// ports, with generated PKI, for the end-to-end suite and `make dev-up`. It
// has no scheduler and no kubelet: admission, RBAC, ServiceAccount tokens and
// garbage collection are real; pods never run.
package cluster

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
)

// Options configures Start.
type Options struct {
	// BinDir holds etcd, kube-apiserver and kube-controller-manager
	// (`make tools`).
	BinDir string
	// StateDir receives the PKI, etcd data, kubeconfigs and logs. It is
	// created; anything in it is overwritten.
	StateDir string
	// Detached starts the components in their own sessions so they outlive
	// this process (devcluster up). Attached components die with it.
	Detached bool
	// NoSignalHandler leaves SIGINT/SIGTERM to the caller (devcluster run
	// stops the components itself on Ctrl-C).
	NoSignalHandler bool
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
	// ExtraAPIServerArgs are appended after the defaults: a repeated scalar
	// flag overrides (the last one wins), a repeated list flag appends (the
	// benchmark turns profiling on).
	ExtraAPIServerArgs []string
}

// ControlPlane is a running local control plane.
type ControlPlane struct {
	opts Options

	CA           *CA
	APIServerURL string
	EtcdURL      string
	// ServiceAccountIssuer is the issuer of the tokens the apiserver signs.
	ServiceAccountIssuer string

	mu        sync.Mutex
	processes []*Process
	stopSig   chan struct{}
}

// Paths inside the state directory.
func (c *ControlPlane) pkiDir() string   { return filepath.Join(c.opts.StateDir, "pki") }
func (c *ControlPlane) LogDir() string   { return filepath.Join(c.opts.StateDir, "logs") }
func (c *ControlPlane) StateDir() string { return c.opts.StateDir }

// AdminKubeconfig is the path of a kubeconfig for the system:masters admin.
func (c *ControlPlane) AdminKubeconfig() string {
	return filepath.Join(c.opts.StateDir, "admin.kubeconfig")
}

func (c *ControlPlane) logf(format string, args ...any) {
	if c.opts.Logf != nil {
		c.opts.Logf(format, args...)
	}
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ServiceLikeIP returns this machine's first non-loopback IPv4 address of
// an interface that is up, or nil. kube-apiserver speaks HTTP/1.1 to a
// webhook URL on such an address, as to a Service-referenced webhook in a
// cluster, but offers HTTP/2 to a loopback URL (k8s.io/apiserver
// pkg/util/webhook/client.go, hookClientConfig), so the bench calls every
// engine's webhook on it.
func ServiceLikeIP() net.IP {
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil
	}
	for _, i := range ifaces {
		if i.Flags&net.FlagUp == 0 || i.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
				return n.IP.To4()
			}
		}
	}
	return nil
}

// Start brings up etcd and kube-apiserver and waits for /readyz. The
// controller manager is started separately (StartControllerManager) after the
// CRDs are installed, so that its garbage collector discovers them at its
// first sync instead of up to 30 s later.
func Start(ctx context.Context, opts Options) (cp *ControlPlane, err error) {
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(opts.BinDir, b)); err != nil {
			return nil, fmt.Errorf("control plane binary %s is missing in %s: run `make tools` first", b, opts.BinDir)
		}
	}
	if err := os.MkdirAll(opts.StateDir, 0o755); err != nil {
		return nil, err
	}
	c := &ControlPlane{opts: opts, stopSig: make(chan struct{})}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if !opts.Detached && !opts.NoSignalHandler {
		c.handleSignals()
	}
	if err := c.writePKI(); err != nil {
		return nil, fmt.Errorf("generate PKI: %w", err)
	}
	if err := c.startEtcd(ctx); err != nil {
		return nil, err
	}
	if err := c.startAPIServer(ctx); err != nil {
		return nil, err
	}
	if err := WriteKubeconfig(c.AdminKubeconfig(), map[string]*rest.Config{"admin": c.AdminConfig()}, "admin"); err != nil {
		return nil, err
	}
	return c, nil
}

// handleSignals stops the components when the test binary is interrupted:
// they are in their own process groups and do not see the terminal's SIGINT.
func (c *ControlPlane) handleSignals() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case s := <-ch:
			fmt.Fprintf(os.Stderr, "cluster: %v: stopping the local control plane\n", s)
			c.Stop()
			os.Exit(130)
		case <-c.stopSig:
			signal.Stop(ch)
		}
	}()
}

func (c *ControlPlane) writePKI() error {
	ca, err := NewCA("sandbox-fence-e2e-ca")
	if err != nil {
		return err
	}
	c.CA = ca
	dir := c.pkiDir()
	if err := ca.Write(dir, "ca"); err != nil {
		return err
	}
	serving, err := ca.Serving("kube-apiserver",
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")})
	if err != nil {
		return err
	}
	if err := WritePair(dir, "apiserver", serving); err != nil {
		return err
	}
	admin, err := ca.Client("admin", []string{"system:masters"})
	if err != nil {
		return err
	}
	if err := WritePair(dir, "admin", admin); err != nil {
		return err
	}
	priv, pub, err := NewServiceAccountKey()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), priv, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sa.pub"), pub, 0o600)
}

func (c *ControlPlane) start(name string, args []string) (*Process, error) {
	p, err := StartProcess(name, filepath.Join(c.opts.BinDir, name), args, filepath.Join(c.LogDir(), name+".log"), c.opts.Detached)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.processes = append(c.processes, p)
	c.mu.Unlock()
	return p, nil
}

// Track adds a process started elsewhere (the webhook) to those Stop ends.
func (c *ControlPlane) Track(p *Process) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.processes = append(c.processes, p)
}

// Processes returns the running components, in start order.
func (c *ControlPlane) Processes() []*Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Process(nil), c.processes...)
}

func (c *ControlPlane) startEtcd(ctx context.Context) error {
	clientPort, err := FreePort()
	if err != nil {
		return err
	}
	peerPort, err := FreePort()
	if err != nil {
		return err
	}
	c.EtcdURL = "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peer := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	c.logf("starting etcd on %s", c.EtcdURL)
	p, err := c.start("etcd", []string{
		"--name=e2e",
		"--data-dir=" + filepath.Join(c.opts.StateDir, "etcd-data"),
		"--listen-client-urls=" + c.EtcdURL,
		"--advertise-client-urls=" + c.EtcdURL,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=e2e=" + peer,
		// Test data: durability buys nothing and fsync dominates on a busy disk.
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	})
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	return c.waitReady(ctx, p, time.Minute, func() error {
		resp, err := hc.Get(c.EtcdURL + "/health")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var h struct{ Health string }
		if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
			return err
		}
		if h.Health != "true" {
			return fmt.Errorf("etcd health %q", h.Health)
		}
		return nil
	})
}

func (c *ControlPlane) startAPIServer(ctx context.Context) error {
	port, err := FreePort()
	if err != nil {
		return err
	}
	c.APIServerURL = "https://127.0.0.1:" + strconv.Itoa(port)
	c.ServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"
	dir := c.pkiDir()
	c.logf("starting kube-apiserver on %s", c.APIServerURL)
	p, err := c.start("kube-apiserver", append([]string{
		"--etcd-servers=" + c.EtcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(c.opts.StateDir, "apiserver-certs"),
		"--tls-cert-file=" + filepath.Join(dir, "apiserver.crt"),
		"--tls-private-key-file=" + filepath.Join(dir, "apiserver.key"),
		"--client-ca-file=" + filepath.Join(dir, "ca.crt"),
		// Production authorization: RBAC only (no nodes here, so no Node
		// authorizer); anonymous requests are refused like in a hardened cluster.
		"--authorization-mode=RBAC",
		"--anonymous-auth=false",
		"--service-account-issuer=" + c.ServiceAccountIssuer,
		"--service-account-key-file=" + filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(dir, "sa.key"),
		"--service-cluster-ip-range=10.0.0.0/24",
		// On loopback the lease/endpoint reconciler would publish 127.0.0.1 as
		// the kubernetes Service endpoint, which the apiserver refuses.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
		"--shutdown-delay-duration=0s",
		"--v=1",
	}, c.opts.ExtraAPIServerArgs...))
	if err != nil {
		return err
	}
	hc, err := c.httpClient(c.AdminConfig())
	if err != nil {
		return err
	}
	return c.waitReady(ctx, p, 3*time.Minute, func() error {
		resp, err := hc.Get(c.APIServerURL + "/readyz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz %d: %s", resp.StatusCode, lastLines(string(body), 5))
		}
		return nil
	})
}

// StartControllerManager starts kube-controller-manager with the
// controllers the suite depends on: the garbage collector (it deletes a
// per-sandbox policy with its owner), the namespace controller
// (namespace teardown), the ClusterRole aggregation controller (the
// operator is a namespace admin through the aggregated admin role) and the ValidatingAdmissionPolicy status controller
// (it fills status.typeChecking, which the suite reads).
//
// Each controller runs under its own ServiceAccount in kube-system
// (--use-service-account-credentials), as kubeadm and the managed
// distributions run them: the garbage collector is then
// system:serviceaccount:kube-system:generic-garbage-collector and the
// namespace controller ...:namespace-controller, the identities the fence
// must never stand in the way of, not the admin.
func (c *ControlPlane) StartControllerManager(ctx context.Context) error {
	port, err := FreePort()
	if err != nil {
		return err
	}
	c.logf("starting kube-controller-manager on 127.0.0.1:%d", port)
	kc := c.AdminKubeconfig()
	p, err := c.start("kube-controller-manager", []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(c.opts.StateDir, "kcm-certs"),
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--controllers=garbage-collector-controller,namespace-controller,serviceaccount-controller,clusterrole-aggregation-controller,validatingadmissionpolicy-status-controller",
		"--root-ca-file=" + filepath.Join(c.pkiDir(), "ca.crt"),
		"--v=1",
	})
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // its self-signed serving cert, loopback only
	url := fmt.Sprintf("https://127.0.0.1:%d/healthz", port)
	return c.waitReady(ctx, p, 2*time.Minute, func() error {
		resp, err := hc.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/healthz %d", resp.StatusCode)
		}
		return nil
	})
}

// waitReady polls check until it succeeds, the process exits (fail fast with
// its log tail) or the timeout passes.
func (c *ControlPlane) waitReady(ctx context.Context, p *Process, timeout time.Duration, check func() error) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if exited, err := p.Exited(); exited {
			return fmt.Errorf("%s exited before it was ready (%v); log %s ends with:\n%s", p.Name, err, p.LogPath, p.Tail(30))
		}
		if last = check(); last == nil {
			c.logf("%s ready in %s", p.Name, time.Since(start).Round(100*time.Millisecond))
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s (last check: %v); log %s ends with:\n%s", p.Name, timeout, last, p.LogPath, p.Tail(30))
		case <-tick.C:
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "; ")
}

func (c *ControlPlane) httpClient(cfg *rest.Config) (*http.Client, error) {
	tc, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}, nil
}

// AdminConfig is a rest.Config for the system:masters admin.
func (c *ControlPlane) AdminConfig() *rest.Config {
	pair := Pair{}
	pair.CertPEM, _ = os.ReadFile(filepath.Join(c.pkiDir(), "admin.crt"))
	pair.KeyPEM, _ = os.ReadFile(filepath.Join(c.pkiDir(), "admin.key"))
	return c.certConfig(pair)
}

// UserConfig issues a client certificate for user in groups and returns a
// rest.Config that authenticates with it: the way the suite gets operator
// and break-glass identities without impersonation.
func (c *ControlPlane) UserConfig(user string, groups []string) (*rest.Config, error) {
	pair, err := c.CA.Client(user, groups)
	if err != nil {
		return nil, err
	}
	return c.certConfig(pair), nil
}

func (c *ControlPlane) certConfig(p Pair) *rest.Config {
	return &rest.Config{
		Host:            c.APIServerURL,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.CA.CertPEM, CertData: p.CertPEM, KeyData: p.KeyPEM},
		QPS:             100,
		Burst:           200,
	}
}

// Stop ends every component, newest first, and waits for each to be gone.
func (c *ControlPlane) Stop() {
	c.mu.Lock()
	ps := append([]*Process(nil), c.processes...)
	c.mu.Unlock()
	for i := len(ps) - 1; i >= 0; i-- {
		ps[i].Stop(5 * time.Second)
	}
	select {
	case <-c.stopSig:
	default:
		close(c.stopSig)
	}
}

// Failed reports a component that exited on its own (nil when all run).
func (c *ControlPlane) Failed() error {
	var errs []error
	for _, p := range c.Processes() {
		if exited, err := p.Exited(); exited {
			errs = append(errs, fmt.Errorf("%s exited (%v); log tail:\n%s", p.Name, err, p.Tail(20)))
		}
	}
	return errors.Join(errs...)
}

// DumpLogs copies every component log into dir (a failed test's output
// directory) and returns a summary of their tails for the test log.
func (c *ControlPlane) DumpLogs(dir string, tail int) string {
	var b strings.Builder
	_ = os.MkdirAll(dir, 0o755)
	for _, p := range c.Processes() {
		if data, err := os.ReadFile(p.LogPath); err == nil {
			_ = os.WriteFile(filepath.Join(dir, filepath.Base(p.LogPath)), data, 0o644)
		}
		fmt.Fprintf(&b, "==> %s (%s) last %d lines:\n%s\n", p.Name, p.LogPath, tail, p.Tail(tail))
	}
	return b.String()
}
