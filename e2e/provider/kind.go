package provider

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kindv1alpha4 "sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	kindcluster "sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"
	"sigs.k8s.io/yaml"

	fencev1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

// EnvKindNodeImage names an offline node image (hack/kind/node-image.sh)
// that every node runs instead of kind.yaml's; with it kind's default CNI
// (kindnetd, pulled from a registry) is off and the provider sets up the pod
// network itself.
const EnvKindNodeImage = "KIND_NODE_IMAGE"

// The phases of `make e2e-kind` this provider runs; every error it returns
// names one (hack/kind/e2e.sh names the others: engine, node image).
const (
	phaseCreate = "create"
	phaseLoad   = "load"
	phaseDeploy = "deploy"
	phaseSuite  = "suite"
)

func phaseErr(phase string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("e2e-kind: %s: %w", phase, err)
}

// kindAPI is the part of sigs.k8s.io/kind the provider drives; a seam so the
// provider is unit-tested up to the container engine.
type kindAPI interface {
	Clusters() ([]string, error)
	// Cgroup2 reports whether the engine's host runs cgroup v2.
	Cgroup2() (bool, error)
	Create(name, configPath, kubeconfigPath string, waitReady time.Duration) error
	LoadImageArchive(name, archivePath string) error
	Nodes(name string) ([]nodes.Node, error)
	Delete(name, kubeconfigPath string) error
	CollectLogs(name, dir string) error
}

// Kind creates a kind cluster from kind.yaml, loads the webhook image,
// deploys config/default as a real Deployment and runs the suite on it.
type Kind struct {
	RepoRoot     string
	BinDir       string
	ClusterName  string
	ConfigPath   string
	ImageArchive string
	// NodeImage, when set, replaces every node's image (EnvKindNodeImage).
	NodeImage string
	// CNI is EnvKindCNI: empty, or CNICilium.
	CNI  string
	Logf framework.Logf

	kubeconfig string
	workDir    string
	api        kindAPI
	env        *framework.Env
	ready      bool
	stopSig    func() bool
}

// NewKind reads KIND_CLUSTER, E2E_IMAGE_ARCHIVE and KIND_NODE_IMAGE.
func NewKind(root, bin string, logf framework.Logf) *Kind {
	name := os.Getenv(EnvKindCluster)
	if name == "" {
		name = "sandbox-fence"
	}
	return &Kind{
		RepoRoot:     root,
		BinDir:       bin,
		ClusterName:  name,
		ConfigPath:   filepath.Join(root, "kind.yaml"),
		ImageArchive: os.Getenv(EnvImageArchive),
		NodeImage:    os.Getenv(EnvKindNodeImage),
		CNI:          os.Getenv(EnvKindCNI),
		Logf:         logf,
	}
}

// Name implements Provider.
func (k *Kind) Name() string { return "kind" }

// LoadKindConfig reads a kind cluster configuration strictly: a typo in
// kind.yaml fails here, not as a mysterious cluster.
func LoadKindConfig(path string) (*kindv1alpha4.Cluster, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c kindv1alpha4.Cluster
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if c.Kind != "Cluster" || c.APIVersion != "kind.x-k8s.io/v1alpha4" {
		return nil, fmt.Errorf("%s: want kind Cluster of kind.x-k8s.io/v1alpha4, got %s %s", path, c.Kind, c.APIVersion)
	}
	if len(c.Nodes) == 0 {
		return nil, fmt.Errorf("%s: no nodes", path)
	}
	return &c, nil
}

// failCgroupV1Patch lets the kubelet run on a cgroup v1 host: since v1.35 it
// refuses to start there unless told otherwise.
const failCgroupV1Patch = `kind: KubeletConfiguration
apiVersion: kubelet.config.k8s.io/v1beta1
failCgroupV1: false
`

// ClusterConfig is the configuration the cluster is created from: kind.yaml
// as users run it, plus only what this host needs. On a cgroup v1 host the
// kubelets get failCgroupV1: false; with an offline node image every node
// runs it and kind's default CNI is off (its image is pulled from a
// registry), the provider's pod network standing in. With cni (CNICilium)
// kind's default CNI is off too, Cilium standing in.
func ClusterConfig(base *kindv1alpha4.Cluster, cgroup2 bool, nodeImage, cni string) *kindv1alpha4.Cluster {
	c := base.DeepCopy()
	if !cgroup2 {
		c.KubeadmConfigPatches = append(c.KubeadmConfigPatches, failCgroupV1Patch)
	}
	if nodeImage != "" {
		for i := range c.Nodes {
			c.Nodes[i].Image = nodeImage
		}
	}
	c.Networking.DisableDefaultCNI = nodeImage != "" || cni != ""
	return c
}

// Validate checks the inputs before anything is created.
func (k *Kind) Validate() error {
	var errs []error
	if _, err := LoadKindConfig(k.ConfigPath); err != nil {
		errs = append(errs, err)
	}
	if k.ImageArchive == "" {
		errs = append(errs, fmt.Errorf("%s is empty: build the webhook image with `make image` (make e2e-kind does)", EnvImageArchive))
	} else if _, err := os.Stat(k.ImageArchive); err != nil {
		errs = append(errs, fmt.Errorf("%s=%s: %w", EnvImageArchive, k.ImageArchive, err))
	}
	if k.ClusterName == "" {
		errs = append(errs, fmt.Errorf("%s is empty", EnvKindCluster))
	}
	if k.CNI != "" && k.CNI != CNICilium {
		errs = append(errs, fmt.Errorf("%s=%s: want %s or nothing", EnvKindCNI, k.CNI, CNICilium))
	}
	return errors.Join(errs...)
}

// Setup implements Provider.
func (k *Kind) Setup(ctx context.Context) (*framework.Env, error) {
	if err := k.Validate(); err != nil {
		return nil, phaseErr(phaseCreate, err)
	}
	if k.api == nil {
		opt, err := kindcluster.DetectNodeProvider()
		if err != nil {
			return nil, phaseErr(phaseCreate, fmt.Errorf("kind needs a container engine (docker, podman or nerdctl): %w", err))
		}
		k.api = &kindLib{p: kindcluster.NewProvider(opt)}
	}
	if err := k.create(); err != nil {
		return nil, phaseErr(phaseCreate, err)
	}
	k.Logf("kind: loading image archive %s", k.ImageArchive)
	if err := k.api.LoadImageArchive(k.ClusterName, k.ImageArchive); err != nil {
		return nil, phaseErr(phaseLoad, fmt.Errorf("kind load image-archive %s: %w", k.ImageArchive, err))
	}
	env, err := k.deploy(ctx)
	if err != nil {
		return nil, phaseErr(phaseDeploy, fmt.Errorf("%w\n%s", err, framework.WebhookPodReport(ctx, k.env)))
	}
	k.ready = true
	return env, nil
}

// create removes a leftover cluster of the same name (a crashed run's),
// then creates the cluster; Ctrl-C from here on deletes it.
func (k *Kind) create() error {
	base, err := LoadKindConfig(k.ConfigPath)
	if err != nil {
		return err
	}
	cgroup2, err := k.api.Cgroup2()
	if err != nil {
		return fmt.Errorf("asking the container engine for its cgroup version: %w", err)
	}
	cfg := ClusterConfig(base, cgroup2, k.NodeImage, k.CNI)
	if k.workDir, err = os.MkdirTemp("", "sandbox-fence-kind-"); err != nil {
		return err
	}
	k.kubeconfig = filepath.Join(k.workDir, "kubeconfig")
	cfgPath := filepath.Join(k.workDir, "kind.yaml")
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	if err := os.WriteFile(cfgPath, b, 0o644); err != nil {
		return err
	}
	existing, err := k.api.Clusters()
	if err != nil {
		return fmt.Errorf("listing kind clusters: %w", err)
	}
	if slices.Contains(existing, k.ClusterName) {
		k.Logf("kind: a cluster %s is left from an earlier run: deleting it first", k.ClusterName)
		if err := k.api.Delete(k.ClusterName, ""); err != nil {
			return fmt.Errorf("deleting the leftover cluster %s: %w", k.ClusterName, err)
		}
	}
	k.handleSignals()
	what := fmt.Sprintf("%d nodes from %s", len(cfg.Nodes), k.ConfigPath)
	if k.NodeImage != "" {
		what += ", offline node image " + k.NodeImage
	}
	if !cgroup2 {
		what += ", cgroup v1 host: failCgroupV1: false"
	}
	if k.CNI != "" {
		what += ", CNI " + k.CNI
	}
	k.Logf("kind: creating cluster %s (%s)", k.ClusterName, what)
	start := time.Now()
	// With kind's CNI the nodes become Ready on their own; with the offline
	// image they wait for the pod network, set up right after.
	wait := 3 * time.Minute
	if cfg.Networking.DisableDefaultCNI {
		wait = 0
	}
	if err := k.api.Create(k.ClusterName, cfgPath, k.kubeconfig, wait); err != nil {
		return fmt.Errorf("kind create cluster %s: %w", k.ClusterName, err)
	}
	switch {
	case k.CNI == CNICilium:
		if err := k.installCilium(context.Background()); err != nil {
			return err
		}
	case k.NodeImage != "":
		if err := k.podNetwork(context.Background()); err != nil {
			return err
		}
	}
	k.Logf("kind: cluster %s up in %s", k.ClusterName, time.Since(start).Round(100*time.Millisecond))
	return nil
}

// handleSignals deletes the cluster when the test binary is interrupted
// (Ctrl-C, a CI timeout): nothing Setup created may outlive the run.
func (k *Kind) handleSignals() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			fmt.Fprintf(os.Stderr, "kind: %v: deleting cluster %s\n", s, k.ClusterName)
			if err := k.api.Delete(k.ClusterName, k.kubeconfig); err != nil {
				fmt.Fprintf(os.Stderr, "kind: deleting cluster %s: %v\n", k.ClusterName, err)
			}
			_ = os.RemoveAll(k.workDir)
			os.Exit(130)
		case <-done:
			signal.Stop(ch)
		}
	}()
	k.stopSig = func() bool { close(done); return true }
}

// deploy installs what `kubectl apply -k config/default` installs (docs/
// install.md), binds the hosts and waits until every enforcer answers.
func (k *Kind) deploy(ctx context.Context) (*framework.Env, error) {
	cfg, err := contextConfig(k.kubeconfig, "")
	if err != nil {
		return nil, err
	}
	admin, err := framework.NewIdentity(framework.ContextAdmin, "", nil, cfg)
	if err != nil {
		return nil, err
	}
	env := &framework.Env{Provider: k.Name(), Admin: admin, InCluster: true}
	k.env = env
	if err := env.CheckServerVersion(ctx, "", k.Logf); err != nil {
		return nil, err
	}
	crds, err := framework.CRDs(ctx, k.RepoRoot, k.Logf)
	if err != nil {
		return nil, err
	}
	if err := env.InstallCRDs(ctx, crds); err != nil {
		return nil, err
	}
	if err := env.SetupIdentities(ctx, framework.Impersonating(cfg)); err != nil {
		return nil, err
	}
	if err := k.installBundle(ctx); err != nil {
		return nil, err
	}
	env.InstallBundle = k.installBundle
	env.MirrorRegistry = k.mirrorRegistry
	env.APIServerProcess = &kindAPIServer{k: k}
	env.Nodes = &kindNodes{k: k}
	if err := finishEnv(ctx, env, k.Logf); err != nil {
		return nil, err
	}
	return env, nil
}

// installBundle installs what `kubectl apply -k config/default` installs
// (docs/install.md) with the suite's hosts bound, and waits for the webhook
// when the bundle has one: at setup, and again after a case removed the
// bundle (Env.InstallBundle).
func (k *Kind) installBundle(ctx context.Context) error {
	env := k.env
	bundle, err := framework.RenderBundle(ctx, filepath.Join(k.BinDir, "kubectl"), k.RepoRoot, k.Logf)
	if err != nil {
		return err
	}
	bundleCRDs, vwcs, objs := bundle.Split()
	if err := env.InstallCRDs(ctx, bundleCRDs); err != nil {
		return err
	}
	// Everything at once, as `kubectl apply -k config/default` would: the
	// webhook's certificate rotation injects the CA into the webhook
	// configuration, so that configuration must exist while it starts.
	if err := env.Apply(ctx, append(objs, vwcs...), framework.ApplyOptions{}); err != nil {
		return err
	}
	if err := env.ConfigureFence(ctx, fencev1.DefaultConfigName); err != nil {
		return err
	}
	if err := env.InstallBaseline(ctx, k.RepoRoot); err != nil {
		return err
	}
	if len(vwcs) > 0 {
		if err := framework.WaitWebhookRolledOut(ctx, env, 5*time.Minute); err != nil {
			return err
		}
		env.WebhookProcess = &deploymentScaler{env: env}
		env.WebhookMetrics = kindMetrics{env: env}
		env.SetEnforcement = k.setEnforcement
	}
	return nil
}

// Teardown implements Provider: logs on failure (kind export logs into
// artifactDir), then delete the cluster.
func (k *Kind) Teardown(_ context.Context, failed bool, artifactDir string) error {
	if k.api == nil {
		return nil
	}
	if failed && k.ready {
		k.Logf("%v", phaseErr(phaseSuite, errors.New("tests failed (above)")))
	}
	if failed && artifactDir != "" && k.kubeconfig != "" {
		dir := filepath.Join(artifactDir, "kind-logs")
		if err := k.api.CollectLogs(k.ClusterName, dir); err != nil {
			k.Logf("kind: exporting logs: %v", err)
		} else {
			k.Logf("kind: logs exported to %s", dir)
		}
	}
	var err error
	if k.kubeconfig != "" {
		k.Logf("kind: deleting cluster %s", k.ClusterName)
		err = k.api.Delete(k.ClusterName, k.kubeconfig)
	}
	if k.stopSig != nil {
		k.stopSig()
	}
	if k.workDir != "" {
		_ = os.RemoveAll(k.workDir)
	}
	return err
}

// kindNodes is framework.Nodes on kind: each node is a container of the
// engine kind runs on.
type kindNodes struct{ k *Kind }

// EngineCLI is the command-line client of the engine kind chose, in kind's
// own order of preference.
func EngineCLI() string {
	if p := os.Getenv("KIND_EXPERIMENTAL_PROVIDER"); p != "" {
		return p
	}
	for _, c := range []string{"docker", "podman", "nerdctl"} {
		if _, err := exec.LookPath(c); err == nil {
			return c
		}
	}
	return "docker"
}

func (n *kindNodes) Stop(ctx context.Context, node string) error {
	if out, err := exec.CommandContext(ctx, EngineCLI(), "kill", node).CombinedOutput(); err != nil {
		return fmt.Errorf("%s kill %s: %v: %s", EngineCLI(), node, err, out)
	}
	return framework.Eventually(ctx, time.Minute, 250*time.Millisecond, "node container "+node+" stopped", func(ctx context.Context) (bool, string, error) {
		out, err := exec.CommandContext(ctx, EngineCLI(), "inspect", "-f", "{{.State.Running}}", node).Output()
		return err == nil && string(out) == "false\n", string(out), nil
	})
}

func (n *kindNodes) Start(ctx context.Context, node string) error {
	if out, err := exec.CommandContext(ctx, EngineCLI(), "start", node).CombinedOutput(); err != nil {
		return fmt.Errorf("%s start %s: %v: %s", EngineCLI(), node, err, out)
	}
	if n.k.NodeImage != "" && n.k.CNI == "" {
		// The node may come back with another address: every route to its
		// pods follows it.
		return n.k.podNetwork(ctx)
	}
	return waitNodesReady(ctx, n.k.env.Admin.Kube, 3*time.Minute)
}

// kindLib is kindAPI on sigs.k8s.io/kind.
type kindLib struct{ p *kindcluster.Provider }

func (l *kindLib) Clusters() ([]string, error) { return l.p.List() }

// Cgroup2 asks the engine, as kind does internally (its answer is not
// exported): the engine's host is the one the kubelets run on.
func (l *kindLib) Cgroup2() (bool, error) {
	cli := EngineCLI()
	format := "{{.CgroupVersion}}"
	if cli == "podman" {
		format = "{{.Host.CgroupsVersion}}"
	}
	out, err := exec.Command(cli, "info", "--format", format).Output()
	if err != nil {
		return false, fmt.Errorf("%s info: %w", cli, err)
	}
	v := strings.TrimSpace(string(out))
	return v == "2" || v == "v2", nil
}

func (l *kindLib) Create(name, configPath, kubeconfigPath string, waitReady time.Duration) error {
	return l.p.Create(name,
		kindcluster.CreateWithConfigFile(configPath),
		kindcluster.CreateWithKubeconfigPath(kubeconfigPath),
		kindcluster.CreateWithWaitForReady(waitReady),
		kindcluster.CreateWithDisplayUsage(false),
		kindcluster.CreateWithDisplaySalutation(false))
}

func (l *kindLib) LoadImageArchive(name, archivePath string) error {
	ns, err := l.p.ListInternalNodes(name)
	if err != nil {
		return err
	}
	for _, n := range ns {
		f, err := os.Open(archivePath)
		if err != nil {
			return err
		}
		err = nodeutils.LoadImageArchive(n, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("node %s: %w", n.String(), err)
		}
	}
	return nil
}

func (l *kindLib) Nodes(name string) ([]nodes.Node, error) { return l.p.ListInternalNodes(name) }

func (l *kindLib) Delete(name, kubeconfigPath string) error { return l.p.Delete(name, kubeconfigPath) }

func (l *kindLib) CollectLogs(name, dir string) error { return l.p.CollectLogs(name, dir) }

// deploymentScaler is framework.WebhookProcess for the in-cluster webhook:
// the Deployment scaled to zero (every pod gone) and back.
type deploymentScaler struct {
	env      *framework.Env
	replicas int32
}

func (s *deploymentScaler) scale(ctx context.Context, n int32) error {
	deps := s.env.Admin.Kube.AppsV1().Deployments(framework.WebhookNamespace)
	sc, err := deps.GetScale(ctx, framework.WebhookName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if n == 0 && sc.Spec.Replicas > 0 {
		s.replicas = sc.Spec.Replicas
	}
	sc.Spec.Replicas = n
	_, err = deps.UpdateScale(ctx, framework.WebhookName, sc, metav1.UpdateOptions{FieldManager: framework.FieldManager})
	return err
}

func (s *deploymentScaler) Stop(ctx context.Context) error {
	if err := s.scale(ctx, 0); err != nil {
		return err
	}
	return framework.Eventually(ctx, 2*time.Minute, 250*time.Millisecond, "every webhook pod gone", func(ctx context.Context) (bool, string, error) {
		pods, err := s.env.Admin.Kube.CoreV1().Pods(framework.WebhookNamespace).List(ctx, metav1.ListOptions{LabelSelector: framework.WebhookPodSelector})
		if err != nil {
			return false, err.Error(), nil
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d pods left", len(pods.Items)), nil
	})
}

func (s *deploymentScaler) Start(ctx context.Context) error {
	if s.replicas == 0 {
		s.replicas = 2
	}
	if err := s.scale(ctx, s.replicas); err != nil {
		return err
	}
	return framework.WaitWebhookRolledOut(ctx, s.env, 3*time.Minute)
}
