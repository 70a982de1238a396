package provider

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kindv1alpha4 "sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	kindcluster "sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"
	"sigs.k8s.io/yaml"

	fencev1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

// kindAPI is the part of sigs.k8s.io/kind the provider drives; a seam so the
// provider is unit-tested up to the container engine.
type kindAPI interface {
	Create(name, configPath, kubeconfigPath string) error
	LoadImageArchive(name, archivePath string) error
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
	Logf         framework.Logf

	kubeconfig string
	api        kindAPI
}

// NewKind reads KIND_CLUSTER and E2E_IMAGE_ARCHIVE.
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
	return errors.Join(errs...)
}

// Setup implements Provider.
func (k *Kind) Setup(ctx context.Context) (*framework.Env, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	if k.api == nil {
		opt, err := kindcluster.DetectNodeProvider()
		if err != nil {
			return nil, fmt.Errorf("kind needs a container engine (docker, podman or nerdctl): %w", err)
		}
		k.api = &kindLib{p: kindcluster.NewProvider(opt)}
	}
	dir, err := os.MkdirTemp("", "sandbox-fence-kind-")
	if err != nil {
		return nil, err
	}
	k.kubeconfig = filepath.Join(dir, "kubeconfig")
	k.Logf("kind: creating cluster %s from %s", k.ClusterName, k.ConfigPath)
	if err := k.api.Create(k.ClusterName, k.ConfigPath, k.kubeconfig); err != nil {
		return nil, fmt.Errorf("kind create cluster %s: %w", k.ClusterName, err)
	}
	k.Logf("kind: loading image archive %s", k.ImageArchive)
	if err := k.api.LoadImageArchive(k.ClusterName, k.ImageArchive); err != nil {
		return nil, fmt.Errorf("kind load image-archive %s: %w", k.ImageArchive, err)
	}
	cfg, err := contextConfig(k.kubeconfig, "")
	if err != nil {
		return nil, err
	}
	admin, err := framework.NewIdentity(framework.ContextAdmin, "", nil, cfg)
	if err != nil {
		return nil, err
	}
	env := &framework.Env{Provider: k.Name(), Admin: admin}
	if err := env.CheckServerVersion(ctx, "", k.Logf); err != nil {
		return nil, err
	}
	crds, err := framework.CRDs(ctx, k.RepoRoot, k.Logf)
	if err != nil {
		return nil, err
	}
	bundle, err := framework.RenderBundle(ctx, filepath.Join(k.BinDir, "kubectl"), k.RepoRoot, k.Logf)
	if err != nil {
		return nil, err
	}
	bundleCRDs, vwcs, objs := bundle.Split()
	if err := env.InstallCRDs(ctx, append(crds, bundleCRDs...)); err != nil {
		return nil, err
	}
	if err := env.SetupIdentities(ctx, framework.Impersonating(cfg)); err != nil {
		return nil, err
	}
	// Everything at once, as `kubectl apply -k config/default` would: the
	// webhook's certificate rotation injects the CA into the webhook
	// configuration, so that configuration must exist while it starts.
	if err := env.Apply(ctx, append(objs, vwcs...), framework.ApplyOptions{}); err != nil {
		return nil, err
	}
	if err := env.ConfigureFence(ctx, fencev1.DefaultConfigName); err != nil {
		return nil, err
	}
	if len(vwcs) > 0 {
		if err := k.waitWebhookAvailable(ctx, env); err != nil {
			return nil, err
		}
	}
	if err := finishEnv(ctx, env, k.Logf); err != nil {
		return nil, err
	}
	return env, nil
}

func (k *Kind) waitWebhookAvailable(ctx context.Context, env *framework.Env) error {
	return framework.Eventually(ctx, 5*time.Minute, time.Second, "webhook Deployment available", func(ctx context.Context) (bool, string, error) {
		d, err := env.Admin.Kube.AppsV1().Deployments(framework.WebhookNamespace).Get(ctx, framework.WebhookName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		for _, c := range d.Status.Conditions {
			if c.Type == appsv1.DeploymentAvailable && c.Status == "True" {
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("conditions %v", d.Status.Conditions), nil
	})
}

// Teardown implements Provider: logs on failure, then delete the cluster.
func (k *Kind) Teardown(_ context.Context, failed bool, artifactDir string) error {
	if k.api == nil {
		return nil
	}
	if failed && artifactDir != "" {
		if err := k.api.CollectLogs(k.ClusterName, artifactDir); err != nil {
			k.Logf("kind: collecting logs: %v", err)
		}
	}
	return k.api.Delete(k.ClusterName, k.kubeconfig)
}

// kindLib is kindAPI on sigs.k8s.io/kind.
type kindLib struct{ p *kindcluster.Provider }

func (l *kindLib) Create(name, configPath, kubeconfigPath string) error {
	return l.p.Create(name,
		kindcluster.CreateWithConfigFile(configPath),
		kindcluster.CreateWithKubeconfigPath(kubeconfigPath),
		kindcluster.CreateWithWaitForReady(3*time.Minute),
		kindcluster.CreateWithDisplayUsage(false),
		kindcluster.CreateWithDisplaySalutation(false))
}

func (l *kindLib) LoadImageArchive(name, archivePath string) error {
	nodes, err := l.p.ListInternalNodes(name)
	if err != nil {
		return err
	}
	for _, n := range nodes {
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

func (l *kindLib) Delete(name, kubeconfigPath string) error { return l.p.Delete(name, kubeconfigPath) }

func (l *kindLib) CollectLogs(name, dir string) error { return l.p.CollectLogs(name, dir) }
