package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sandbox-fence/sandbox-fence/e2e/cluster"
	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

// Options configures Start.
type Options struct {
	// BinDir holds the control plane (hack/tools/build.sh) and the node
	// binaries (hack/node/build.sh).
	BinDir string
	// StateDir holds everything of the run; it is emptied at start.
	StateDir string
	// Images are docker-archive tarballs imported into containerd's k8s.io
	// namespace (the pause image, the webhook image).
	Images []string
	Logf   framework.Logf
}

// Node is a running single-node cluster.
type Node struct {
	opts   Options
	Layout Layout
	CP     *cluster.ControlPlane
	// Processes of the node, in start order (the control plane's are in CP).
	procs []*cluster.Process
}

func (n *Node) logf(format string, args ...any) {
	if n.opts.Logf != nil {
		n.opts.Logf(format, args...)
	}
}

// Start cleans what a previous run left, prepares the host and starts
// containerd, the control plane, kube-scheduler, kube-proxy and the kubelet,
// and returns once the node is Ready. The controller manager is started by
// the caller (StartControllerManager) once its CRDs are installed, as the
// local provider does.
func Start(ctx context.Context, opts Options) (n *Node, err error) {
	if err := Requirements(opts.BinDir); err != nil {
		return nil, err
	}
	state, err := filepath.Abs(opts.StateDir)
	if err != nil {
		return nil, err
	}
	opts.StateDir = state
	n = &Node{opts: opts, Layout: Layout{Dir: state}}
	if err := Cleanup(state, n.logf); err != nil {
		return nil, fmt.Errorf("cleaning up a previous node run: %w", err)
	}
	if err := os.RemoveAll(state); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			n.Stop()
		}
	}()
	if _, err := Prepare(state, opts.BinDir); err != nil {
		return n, fmt.Errorf("prepare the host: %w", err)
	}
	if err := n.startContainerd(ctx); err != nil {
		return n, err
	}
	for _, img := range opts.Images {
		if err := n.importImage(ctx, img); err != nil {
			return n, err
		}
	}
	cpDir := n.Layout.ControlPlane()
	pki := filepath.Join(cpDir, "pki")
	n.CP, err = cluster.Start(ctx, cluster.Options{
		BinDir:   opts.BinDir,
		StateDir: cpDir,
		Logf:     opts.Logf,
		OnInterrupt: func() {
			if err := n.Stop(); err != nil {
				n.logf("node: stop after interrupt: %v", err)
			}
		},
		ExtraAPIServerArgs: []string{
			// Pods reach the apiserver through the kubernetes Service,
			// whose endpoint is the advertise address: it must be a
			// non-loopback address the apiserver listens on.
			"--bind-address=0.0.0.0",
			"--advertise-address=" + AdvertiseIP,
			"--endpoint-reconciler-type=lease",
			// A kubelet: the Node authorizer and NodeRestriction, as in
			// production, and the settings logs and exec need.
			// List flags append to the control plane's: this makes Node,RBAC.
			"--authorization-mode=Node",
			"--enable-admission-plugins=NodeRestriction",
			"--allow-privileged=true",
			"--kubelet-preferred-address-types=InternalIP,Hostname",
			"--kubelet-client-certificate=" + filepath.Join(pki, "admin.crt"),
			"--kubelet-client-key=" + filepath.Join(pki, "admin.key"),
			// The apiserver calls webhook Services at an endpoint IP, not
			// through a ClusterIP it has no route for.
			"--enable-aggregator-routing=true",
		},
		ExtraControllerManagerArgs: []string{
			// Appended to the control plane's list (garbage collector,
			// namespaces, ServiceAccounts, VAP status).
			"--controllers=" + strings.Join([]string{
				// What a Deployment behind a Service with a PDB needs.
				"deployment-controller", "replicaset-controller", "endpoints-controller",
				"endpointslice-controller", "disruption-controller", "pod-garbage-collector-controller",
				// The kube-root-ca.crt ConfigMap every projected token volume mounts.
				"root-ca-certificate-publisher-controller",
				// Lifts the kubelet's not-ready taint once the node is Ready.
				"node-lifecycle-controller",
			}, ","),
		},
	})
	if err != nil {
		return n, err
	}
	if err := guardAPIServer(n.CP.APIServerURL); err != nil {
		return n, err
	}
	if err := n.startScheduler(ctx); err != nil {
		return n, err
	}
	// The kubelet first: kube-proxy waits for its Node object to learn the
	// node's address.
	waitReady, err := n.startKubelet()
	if err != nil {
		return n, err
	}
	if err := n.startKubeProxy(ctx); err != nil {
		return n, err
	}
	if err := waitReady(ctx); err != nil {
		return n, err
	}
	return n, nil
}

func guardAPIServer(url string) error {
	i := strings.LastIndexByte(url, ':')
	port, err := strconv.Atoi(url[i+1:])
	if err != nil {
		return fmt.Errorf("apiserver URL %s has no port: %w", url, err)
	}
	return GuardAPIServerPort(port)
}

func (n *Node) start(name, bin string, args []string) (*cluster.Process, error) {
	p, err := cluster.StartProcess(name, bin, args, filepath.Join(n.Layout.Logs(), name+".log"), false)
	if err != nil {
		return nil, err
	}
	n.procs = append(n.procs, p)
	return p, nil
}

// waitFor polls check until it passes, p exits (its log tail is the error)
// or timeout.
func (n *Node) waitFor(ctx context.Context, p *cluster.Process, timeout time.Duration, what string, check func(context.Context) (bool, string, error)) error {
	start := time.Now()
	err := framework.Eventually(ctx, timeout, 200*time.Millisecond, what, func(ctx context.Context) (bool, string, error) {
		if exited, perr := p.Exited(); exited {
			return false, "", fmt.Errorf("%s exited (%v); log %s ends with:\n%s", p.Name, perr, p.LogPath, p.Tail(30))
		}
		return check(ctx)
	})
	if err != nil {
		return fmt.Errorf("%w\n%s log %s ends with:\n%s", err, p.Name, p.LogPath, p.Tail(30))
	}
	n.logf("node: %s in %s", what, time.Since(start).Round(100*time.Millisecond))
	return nil
}

func (n *Node) ctr(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", n.Layout.ContainerdSocket(), "--namespace", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func (n *Node) startContainerd(ctx context.Context) error {
	l := n.Layout
	for _, d := range []string{l.Containerd(), l.CNIConfDir(), l.CNIDataDir(), l.Logs()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(l.ContainerdConfig(), []byte(ContainerdConfig(l)), 0o644); err != nil {
		return err
	}
	cni, err := CNIConfig(l)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(l.CNIConfDir(), "10-"+CNINetwork+".conflist"), cni, 0o644); err != nil {
		return err
	}
	bin, err := exec.LookPath("containerd")
	if err != nil {
		return err
	}
	p, err := n.start("containerd", bin, []string{"--config", l.ContainerdConfig(), "--log-level", "warn"})
	if err != nil {
		return err
	}
	return n.waitFor(ctx, p, time.Minute, "containerd serving", func(ctx context.Context) (bool, string, error) {
		if _, err := n.ctr(ctx, "version"); err != nil {
			return false, err.Error(), nil
		}
		return true, "", nil
	})
}

func (n *Node) importImage(ctx context.Context, tarball string) error {
	start := time.Now()
	out, err := n.ctr(ctx, "images", "import", tarball)
	if err != nil {
		return fmt.Errorf("import image %s: %w", tarball, err)
	}
	n.logf("node: imported %s in %s: %s", filepath.Base(tarball), time.Since(start).Round(100*time.Millisecond), strings.TrimSpace(out))
	return nil
}

// kubeconfigFor writes a kubeconfig with a client certificate for user in
// groups: each component runs as its production identity, bound by the
// default RBAC (or the Node authorizer for the kubelet).
func (n *Node) kubeconfigFor(path, user string, groups ...string) error {
	cfg, err := n.CP.UserConfig(user, groups)
	if err != nil {
		return err
	}
	return cluster.WriteKubeconfig(path, map[string]*rest.Config{"default": cfg}, "default")
}

func insecureGetter() *http.Client {
	//nolint:gosec // self-signed serving certificates of our own components, loopback only
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
}

func httpOK(url string) func(context.Context) (bool, string, error) {
	hc := insecureGetter()
	return func(context.Context) (bool, string, error) {
		resp, err := hc.Get(url)
		if err != nil {
			return false, err.Error(), nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status, nil
	}
}

func (n *Node) startScheduler(ctx context.Context) error {
	dir := n.Layout.Scheduler()
	kc := filepath.Join(dir, "kubeconfig")
	if err := n.kubeconfigFor(kc, "system:kube-scheduler"); err != nil {
		return err
	}
	port, err := cluster.FreePort()
	if err != nil {
		return err
	}
	p, err := n.start("kube-scheduler", filepath.Join(n.opts.BinDir, "kube-scheduler"), []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--leader-elect=false",
		"--v=1",
	})
	if err != nil {
		return err
	}
	return n.waitFor(ctx, p, 2*time.Minute, "kube-scheduler healthy", httpOK(fmt.Sprintf("https://127.0.0.1:%d/healthz", port)))
}

func (n *Node) startKubeProxy(ctx context.Context) error {
	dir := n.Layout.KubeProxy()
	kc := filepath.Join(dir, "kubeconfig")
	if err := n.kubeconfigFor(kc, "system:kube-proxy"); err != nil {
		return err
	}
	healthz, err := cluster.FreePort()
	if err != nil {
		return err
	}
	metrics, err := cluster.FreePort()
	if err != nil {
		return err
	}
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(KubeProxyConfig(kc, healthz, metrics)), 0o644); err != nil {
		return err
	}
	p, err := n.start("kube-proxy", filepath.Join(n.opts.BinDir, "kube-proxy"), []string{"--config=" + cfg, "--v=1"})
	if err != nil {
		return err
	}
	// kube-proxy reports healthy only after its first full sync of rules.
	return n.waitFor(ctx, p, 2*time.Minute, "kube-proxy synced", func(ctx context.Context) (bool, string, error) {
		return httpOK(fmt.Sprintf("http://127.0.0.1:%d/healthz", healthz))(ctx)
	})
}

// startKubelet starts the kubelet and returns a wait for its node to be
// Ready.
func (n *Node) startKubelet() (func(context.Context) error, error) {
	l := n.Layout
	for _, d := range []string{l.KubeletRoot(), l.PodLogs()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	kc := filepath.Join(l.Kubelet(), "kubeconfig")
	if err := n.kubeconfigFor(kc, "system:node:"+NodeName, "system:nodes"); err != nil {
		return nil, err
	}
	var ports KubeletPorts
	var err error
	if ports.Server, err = cluster.FreePort(); err != nil {
		return nil, err
	}
	if ports.Healthz, err = cluster.FreePort(); err != nil {
		return nil, err
	}
	cfg := filepath.Join(l.Kubelet(), "config.yaml")
	ca := filepath.Join(n.Layout.ControlPlane(), "pki", "ca.crt")
	if err := os.WriteFile(cfg, []byte(KubeletConfig(l, ca, ports)), 0o644); err != nil {
		return nil, err
	}
	p, err := n.start("kubelet", filepath.Join(n.opts.BinDir, "kubelet"), []string{
		"--config=" + cfg,
		"--kubeconfig=" + kc,
		"--root-dir=" + l.KubeletRoot(),
		"--cert-dir=" + filepath.Join(l.Kubelet(), "pki"),
		"--hostname-override=" + NodeName,
		"--node-ip=" + AdvertiseIP,
		"--v=1",
	})
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(n.CP.AdminConfig())
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		return n.waitFor(ctx, p, 3*time.Minute, "node "+NodeName+" Ready", func(ctx context.Context) (bool, string, error) {
			node, err := kube.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady {
					return c.Status == corev1.ConditionTrue, c.Reason + ": " + c.Message, nil
				}
			}
			return false, "no Ready condition yet", nil
		})
	}, nil
}

// Stop ends the node and the control plane and undoes every host change;
// the error lists anything Check still finds.
func (n *Node) Stop() error {
	var errs []error
	// The kubelet first, so it restarts nothing; then every container
	// (Cleanup kills the cgroups' tasks), then the daemons.
	for i := len(n.procs) - 1; i >= 0; i-- {
		n.procs[i].Stop(5 * time.Second)
		if n.procs[i].Name == "kubelet" {
			if err := killCgroupTasks(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if n.CP != nil {
		n.CP.Stop()
	}
	if err := Cleanup(n.Layout.Dir, n.logf); err != nil {
		errs = append(errs, err)
	}
	if left := Check(n.Layout.Dir); len(left) > 0 {
		errs = append(errs, fmt.Errorf("teardown left: %s", strings.Join(left, "; ")))
	}
	return errors.Join(errs...)
}
