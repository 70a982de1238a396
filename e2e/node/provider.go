package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fencev1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/e2e/cluster"
	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

// Environment variables of the node provider.
const (
	// EnvImageArchive is the webhook image tarball (`make image`); the same
	// variable the kind provider reads.
	EnvImageArchive = "E2E_IMAGE_ARCHIVE"
	// EnvPauseArchive is the pause image tarball (hack/node/setup.sh).
	EnvPauseArchive = "E2E_PAUSE_ARCHIVE"
)

// OverlayDir is the kustomize overlay of config/default this provider
// deploys: the shipped bundle with only what a registry-less node needs.
const OverlayDir = "config/overlays/node"

// Provider is E2E_PROVIDER=node: it has the method set of the suite's
// provider.Provider.
type Provider struct {
	RepoRoot     string
	BinDir       string
	StateDir     string
	ImageArchive string
	PauseArchive string
	Logf         framework.Logf

	Node *Node
	Env  *framework.Env
}

// NewProvider reads E2E_IMAGE_ARCHIVE and E2E_PAUSE_ARCHIVE, defaulting to
// the files `make image` and hack/node/setup.sh write into bin/.
func NewProvider(root, bin string, logf framework.Logf) *Provider {
	img := os.Getenv(EnvImageArchive)
	if img == "" {
		img = filepath.Join(bin, "webhook-image.tar")
	}
	pause := os.Getenv(EnvPauseArchive)
	if pause == "" {
		pause = filepath.Join(bin, "pause-image.tar")
	}
	return &Provider{
		RepoRoot: root, BinDir: bin, StateDir: filepath.Join(root, ".dev", "node"),
		ImageArchive: img, PauseArchive: pause, Logf: logf,
	}
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return "node" }

// Validate checks the inputs before the host is touched. The webhook image
// is needed only when the bundle deploys the webhook.
func (p *Provider) Validate(deploysWebhook bool) error {
	var errs []error
	files := []struct{ path, how string }{{p.PauseArchive, "hack/node/setup.sh builds it"}}
	if deploysWebhook {
		files = append(files, struct{ path, how string }{p.ImageArchive, "`make image` builds it"})
	}
	for _, f := range files {
		if _, err := os.Stat(f.path); err != nil {
			errs = append(errs, fmt.Errorf("%s is missing (%s)", f.path, f.how))
		}
	}
	errs = append(errs, Requirements(p.BinDir))
	return errors.Join(errs...)
}

// hasWebhookDeployment reports whether the rendered bundle deploys the
// webhook.
func hasWebhookDeployment(objs []*unstructured.Unstructured) bool {
	for _, o := range objs {
		if o.GetKind() == "Deployment" && o.GetNamespace() == framework.WebhookNamespace && o.GetName() == framework.WebhookName {
			return true
		}
	}
	return false
}

// Setup implements provider.Provider: the node, CRDs, controller manager,
// identities, the overlay of config/default (Deployment, Service, PDB,
// cert-controller rotation, VAPs), the FenceConfig, then enforcement.
func (p *Provider) Setup(ctx context.Context) (*framework.Env, error) {
	start := time.Now()
	if _, err := os.Stat(filepath.Join(p.RepoRoot, OverlayDir, "kustomization.yaml")); err != nil {
		return nil, fmt.Errorf("the node overlay of config/default is missing: %w", err)
	}
	objs, err := framework.Kustomize(ctx, filepath.Join(p.BinDir, "kubectl"), filepath.Join(p.RepoRoot, OverlayDir))
	if err != nil {
		return nil, err
	}
	deploysWebhook := hasWebhookDeployment(objs)
	if err := p.Validate(deploysWebhook); err != nil {
		return nil, err
	}
	images := []string{p.PauseArchive}
	if deploysWebhook {
		images = append(images, p.ImageArchive)
	} else {
		p.Logf("!!! %s renders no Deployment %s/%s: the webhook is NOT DEPLOYED; webhook cases will skip", OverlayDir, framework.WebhookNamespace, framework.WebhookName)
	}
	n, err := Start(ctx, Options{BinDir: p.BinDir, StateDir: p.StateDir, Logf: p.Logf, Images: images})
	p.Node = n
	if err != nil {
		return nil, err
	}
	admin, err := framework.NewIdentity(framework.ContextAdmin, "admin", []string{"system:masters"}, n.CP.AdminConfig())
	if err != nil {
		return nil, err
	}
	env := &framework.Env{Provider: p.Name(), Admin: admin}
	p.Env = env
	crds, err := framework.CRDs(ctx, p.RepoRoot, p.BinDir, p.Logf)
	if err != nil {
		return nil, err
	}
	bundle := &framework.Bundle{Objects: objs}
	bundleCRDs, vwcs, rest := bundle.Split()
	if err := env.InstallCRDs(ctx, append(crds, bundleCRDs...)); err != nil {
		return nil, err
	}
	if err := n.CP.StartControllerManager(ctx); err != nil {
		return nil, err
	}
	if err := env.SetupIdentities(ctx, n.CP.UserConfig); err != nil {
		return nil, err
	}
	// The webhook configuration goes in with the rest, as `kubectl apply -k`
	// would: cert-controller injects its caBundle once the Deployment runs.
	if err := env.Apply(ctx, append(rest, vwcs...), framework.ApplyOptions{}); err != nil {
		return nil, err
	}
	if err := env.ConfigureFence(ctx, fencev1.DefaultConfigName); err != nil {
		return nil, err
	}
	if deploysWebhook {
		if err := WaitDeploymentAvailable(ctx, env, 5*time.Minute); err != nil {
			return nil, fmt.Errorf("%w\n%s", err, p.podReport(ctx))
		}
	}
	env.WebhookInstalled = len(vwcs) > 0
	if !env.WebhookInstalled {
		p.Logf("!!! the overlay rendered no ValidatingWebhookConfiguration: webhook cases will skip")
	}
	if env.ConversionServed, err = framework.ConversionServed(ctx, env); err != nil {
		return nil, err
	}
	if err := env.WaitForEnforcement(ctx, p.Logf); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, p.podReport(ctx))
	}
	p.Logf("node: environment ready in %s (state %s)", time.Since(start).Round(100*time.Millisecond), p.StateDir)
	return env, nil
}

// WaitDeploymentAvailable waits for the webhook Deployment to have every
// replica updated and available: what `kubectl rollout status` waits for.
func WaitDeploymentAvailable(ctx context.Context, env *framework.Env, timeout time.Duration) error {
	return framework.Eventually(ctx, timeout, 250*time.Millisecond, "webhook Deployment rolled out", func(ctx context.Context) (bool, string, error) {
		d, err := env.Admin.Kube.AppsV1().Deployments(framework.WebhookNamespace).Get(ctx, framework.WebhookName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "", fmt.Errorf("Deployment %s/%s is not in the rendered %s", framework.WebhookNamespace, framework.WebhookName, OverlayDir)
		}
		if err != nil {
			return false, err.Error(), nil
		}
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		s := d.Status
		done := s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want &&
			s.Replicas == want && s.AvailableReplicas == want
		for _, c := range s.Conditions {
			if c.Type == appsv1.DeploymentProgressing && c.Reason == "ProgressDeadlineExceeded" {
				return false, "", fmt.Errorf("rollout stuck: %s", c.Message)
			}
		}
		return done, fmt.Sprintf("replicas %d updated %d available %d of %d", s.Replicas, s.UpdatedReplicas, s.AvailableReplicas, want), nil
	})
}

// podReport describes the webhook pods for a failure message: phase,
// container states and the last events, what `kubectl describe` would show.
func (p *Provider) podReport(ctx context.Context) string {
	if p.Env == nil {
		return ""
	}
	kc := p.Env.Admin.Kube
	var b strings.Builder
	pods, err := kc.CoreV1().Pods(framework.WebhookNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "list webhook pods: " + err.Error()
	}
	for _, pod := range pods.Items {
		fmt.Fprintf(&b, "pod %s: %s on %q\n", pod.Name, pod.Status.Phase, pod.Spec.NodeName)
		for _, cs := range pod.Status.ContainerStatuses {
			fmt.Fprintf(&b, "  container %s ready=%v restarts=%d state=%s\n", cs.Name, cs.Ready, cs.RestartCount, containerState(cs.State))
		}
	}
	evs, err := kc.CoreV1().Events(framework.WebhookNamespace).List(ctx, metav1.ListOptions{})
	if err == nil {
		items := evs.Items
		if len(items) > 15 {
			items = items[len(items)-15:]
		}
		for _, e := range items {
			fmt.Fprintf(&b, "event %s %s/%s: %s\n", e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Message)
		}
	}
	return b.String()
}

func containerState(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running"
	case s.Waiting != nil:
		return "waiting " + s.Waiting.Reason + " " + s.Waiting.Message
	case s.Terminated != nil:
		return fmt.Sprintf("terminated %s exit %d %s", s.Terminated.Reason, s.Terminated.ExitCode, s.Terminated.Message)
	}
	return "unknown"
}

// Teardown implements provider.Provider: logs on failure, then stop
// everything and check the host is clean; leftovers fail the run.
func (p *Provider) Teardown(ctx context.Context, failed bool, artifactDir string) error {
	if p.Node == nil {
		return Cleanup(p.StateDir, p.Logf)
	}
	if failed {
		dir := artifactDir
		if dir == "" {
			dir = filepath.Join(p.StateDir, "..", "node-failed-logs")
		}
		fmt.Fprint(os.Stderr, p.podReport(ctx))
		fmt.Fprintf(os.Stderr, "node logs (copied to %s):\n%s", dir, p.Node.DumpLogs(dir, 40))
	}
	return p.Node.Stop()
}

// DumpLogs copies the logs of the node and control plane processes into dir
// and returns their tails.
func (n *Node) DumpLogs(dir string, tail int) string {
	var b strings.Builder
	_ = os.MkdirAll(dir, 0o755)
	if n.CP != nil {
		b.WriteString(n.CP.DumpLogs(dir, tail))
	}
	for _, p := range n.procs {
		if data, err := os.ReadFile(p.LogPath); err == nil {
			_ = os.WriteFile(filepath.Join(dir, filepath.Base(p.LogPath)), data, 0o644)
		}
		fmt.Fprintf(&b, "==> %s (%s) last %d lines:\n%s\n", p.Name, p.LogPath, tail, cluster.TailFile(p.LogPath, tail))
	}
	return b.String()
}
