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
	// EnvOverlay names another kustomization to deploy instead of
	// OverlayDir (a variant such as strict delete); relative to the
	// repository root.
	EnvOverlay = "E2E_NODE_OVERLAY"
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
	// Overlay is the kustomization deployed, relative to RepoRoot.
	Overlay string
	Logf    framework.Logf

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
	overlay := os.Getenv(EnvOverlay)
	if overlay == "" {
		overlay = OverlayDir
	}
	return &Provider{
		RepoRoot: root, BinDir: bin, StateDir: filepath.Join(root, ".dev", "node"),
		ImageArchive: img, PauseArchive: pause, Overlay: overlay, Logf: logf,
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
	if _, err := os.Stat(filepath.Join(p.RepoRoot, p.Overlay, "kustomization.yaml")); err != nil {
		return nil, fmt.Errorf("the kustomization to deploy is missing: %w", err)
	}
	p.Logf("node: deploying %s", p.Overlay)
	objs, err := framework.Kustomize(ctx, filepath.Join(p.BinDir, "kubectl"), filepath.Join(p.RepoRoot, p.Overlay))
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
		p.Logf("!!! %s renders no Deployment %s/%s: the webhook is NOT DEPLOYED; webhook cases will skip", p.Overlay, framework.WebhookNamespace, framework.WebhookName)
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
	crds, err := framework.CRDs(ctx, p.RepoRoot, p.Logf)
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
		if !done {
			if why := crashLooping(ctx, env); why != "" {
				return false, "", fmt.Errorf("the rollout cannot finish: %s", why)
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
			fmt.Fprintf(&b, "  container %s ready=%v restarts=%d state=%s last=%s\n", cs.Name, cs.Ready, cs.RestartCount, containerState(cs.State), containerState(cs.LastTerminationState))
			if p.Node != nil {
				fmt.Fprintf(&b, "  last log lines:\n%s\n", indent(p.Node.ContainerLogTail(pod.Namespace, pod.Name, string(pod.UID), cs.Name, 8), "    "))
			}
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

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+prefix)
}

// ContainerLogTail reads the newest log of a container straight from the
// kubelet's pod log directory: it works when the apiserver cannot reach the
// kubelet, and after the container exited.
func (n *Node) ContainerLogTail(namespace, pod, uid, container string, lines int) string {
	dir := filepath.Join(n.Layout.PodLogs(), namespace+"_"+pod+"_"+uid, container)
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		return "(no log)"
	}
	newest, newestTime := "", time.Time{}
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && fi.ModTime().After(newestTime) {
			newest, newestTime = e.Name(), fi.ModTime()
		}
	}
	return cluster.TailFile(filepath.Join(dir, newest), lines)
}

// crashLooping names a webhook container that keeps failing, so Setup stops
// waiting for a rollout that cannot finish and shows why.
func crashLooping(ctx context.Context, env *framework.Env) string {
	pods, err := env.Admin.Kube.CoreV1().Pods(framework.WebhookNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return ""
	}
	for _, pod := range pods.Items {
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.RestartCount >= 2 && !cs.Ready {
				return fmt.Sprintf("container %s of pod %s restarted %d times (%s)", cs.Name, pod.Name, cs.RestartCount, containerState(cs.LastTerminationState))
			}
			if w := cs.State.Waiting; w != nil && (w.Reason == "ErrImageNeverPull" || w.Reason == "CreateContainerConfigError" || w.Reason == "CreateContainerError") {
				return fmt.Sprintf("container %s of pod %s: %s %s", cs.Name, pod.Name, w.Reason, w.Message)
			}
		}
	}
	return ""
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
