//go:build e2e

package e2e

// The lifecycle of an install, as an admin lives it: remove the suite's
// install, install a release from its install.yaml, upgrade it to a release
// whose policy changed, uninstall it; then the same with the release's
// Helm chart. Every step runs the commands docs/install.md gives, with
// bin/kubectl and bin/helm, and writes by users the fence is not about are
// sent throughout and must never be refused. The releases are built by
// hack/release (make release) and their image indexes pulled by the nodes
// from a registry this case serves, by the digest install.yaml pins.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	fencev1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/e2e/cluster"
	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/internal/fencectl"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

const (
	// releaseRegistry is the registry the releases' install.yaml pins the
	// image under; every node resolves it to the registry this case serves
	// (Env.MirrorRegistry). .invalid: it can never be a real one.
	releaseRegistry = "registry.e2e.invalid"
	releaseRepo     = "sandbox-fence/sandbox-fence-webhook"
	// refusedFromV2 is the upgrade's policy change: v0.1.1's holder-epoch
	// policy refuses a Sandbox carrying this annotation, v0.1.0's admits it.
	refusedFromV2 = "e2e.sandbox.namzu.ai/refused-from-v0.1.1"
)

// The commands of docs/install.md this case runs; TestTheLifecycleCommandsAreDocumented
// keeps them in the document. RELEASE is the release's install.yaml.
var (
	// installFromRelease: the CRD alone first, the install's version gate
	// (an older API server refuses it and nothing else is created), then
	// the whole file.
	installFromRelease = [][]string{
		{"kubectl", "apply", "--server-side", "-f", "install.yaml", "-l", "app.kubernetes.io/component=crd"},
		{"kubectl", "apply", "--server-side", "-f", "install.yaml"},
		{"kubectl", "apply", "--server-side", "-f", "baseline.yaml"},
	}
	// configureRelease: the release's FenceConfig, once its CRD is
	// established (the case then binds its hosts, as the admin's edit of
	// the file would).
	configureRelease = [][]string{
		{"kubectl", "wait", "--for=condition=Established", "crd/fenceconfigs.fence.sandbox.namzu.ai"},
		{"kubectl", "apply", "--server-side", "-f", "fenceconfig.yaml"},
	}
	upgradeRelease = [][]string{
		{"kubectl", "apply", "--server-side", "--force-conflicts", "-f", "install.yaml"},
	}
	// uninstallFirst: steps 1 and 2 of Uninstall, the same for every install.
	uninstallFirst = [][]string{
		{"kubectl", "delete", "validatingwebhookconfiguration", "sandbox-fence-webhook"},
		{"kubectl", "delete", "validatingadmissionpolicybinding", "-l", "app.kubernetes.io/name=sandbox-fence"},
		{"kubectl", "delete", "validatingadmissionpolicy", "-l", "app.kubernetes.io/name=sandbox-fence"},
	}
	uninstallRest = [][]string{
		{"kubectl", "delete", "-f", "baseline.yaml", "--ignore-not-found"},
		{"kubectl", "delete", "-f", "install.yaml", "--ignore-not-found"},
		{"kubectl", "delete", "crd", "fenceconfigs.fence.sandbox.namzu.ai", "--ignore-not-found"},
	}
	// chartNamespace: the release namespace, made before helm install so
	// the webhook's pods are admitted under the restricted Pod Security
	// profile (helm install --create-namespace would make it unlabelled).
	chartNamespace = [][]string{
		{"kubectl", "create", "namespace", "sandbox-fence-system"},
		{"kubectl", "label", "namespace", "sandbox-fence-system", "pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/enforce-version=latest"},
	}
	// uninstallChart: the chart's hooks take Uninstall's steps 1 and 2
	// before Helm deletes the rest, and delete the CRD after it (the
	// case's values set crds.keep false).
	uninstallChart = [][]string{
		{"helm", "uninstall", "sandbox-fence", "-n", "sandbox-fence-system", "--wait"},
		{"kubectl", "delete", "namespace", "sandbox-fence-system", "--ignore-not-found"},
	}
)

// lifecycle runs docs/install.md's commands against the suite's cluster.
type lifecycle struct {
	t          *testing.T
	kubeconfig string
	bin        string
	root       string
}

// run runs each command; install.yaml and fenceconfig.yaml stand for
// rel's files.
func (l *lifecycle) run(ctx context.Context, rel *framework.Release, cmds [][]string) {
	l.t.Helper()
	for _, c := range cmds {
		args := append([]string(nil), c[1:]...)
		for i, a := range args {
			switch {
			case rel == nil && a == "baseline.yaml":
				args[i] = filepath.Join("config", "components", "cilium-baseline", "baseline.yaml")
			case rel == nil:
			case a == "install.yaml":
				args[i] = rel.InstallYAML()
			case a == "fenceconfig.yaml":
				args[i] = rel.FenceConfigYAML()
			case a == "baseline.yaml":
				args[i] = rel.BaselineYAML()
			}
		}
		args = append(args, "--kubeconfig", l.kubeconfig)
		cmd := exec.CommandContext(ctx, filepath.Join(l.bin, c[0]), args...)
		cmd.Dir = l.root
		start := time.Now()
		out, err := cmd.CombinedOutput()
		l.t.Logf("$ %s (%s)\n%s", strings.Join(c, " "), time.Since(start).Round(100*time.Millisecond), bytes.TrimSpace(out))
		if err != nil {
			l.t.Fatalf("%s: %v", strings.Join(c, " "), err)
		}
	}
}

// gone waits until the cluster holds none of objs.
func (l *lifecycle) gone(ctx context.Context, what string, objs []*unstructured.Unstructured) {
	l.t.Helper()
	err := framework.Eventually(ctx, 3*time.Minute, time.Second, what+": nothing of the install left", func(ctx context.Context) (bool, string, error) {
		left, err := env.Leftovers(ctx, objs)
		if err != nil {
			return false, err.Error(), nil
		}
		return len(left) == 0, fmt.Sprintf("left: %v", left), nil
	})
	if err != nil {
		l.t.Fatal(err)
	}
	l.t.Logf("%s: none of its %d objects left", what, len(objs))
}

// ready configures the hosts (unless the install did), waits for the
// webhook's rollout and for every enforcer's marker, and checks that the
// webhook runs image.
func (l *lifecycle) ready(ctx context.Context, image string, configure bool) {
	l.t.Helper()
	if configure {
		if err := env.ConfigureFence(ctx, fencev1.DefaultConfigName); err != nil {
			l.t.Fatal(err)
		}
	}
	start := time.Now()
	if err := framework.WaitWebhookRolledOut(ctx, env, 5*time.Minute); err != nil {
		l.t.Fatalf("%v\n%s", err, framework.WebhookPodReport(ctx, env))
	}
	if err := env.WaitForEnforcement(ctx, l.t.Logf); err != nil {
		l.t.Fatal(err)
	}
	for _, p := range webhookPods(l.t) {
		for _, c := range p.Spec.Containers {
			if c.Image != image {
				l.t.Errorf("webhook pod %s runs %s, want %s", p.Name, c.Image, image)
			}
		}
	}
	l.t.Logf("webhook %s rolled out and every enforcer's marker denied in %s", image, time.Since(start).Round(100*time.Millisecond))
}

// holdersSurvive checks that the FenceConfig still binds the suite's hosts:
// an upgrade keeps the admin's configuration.
func (l *lifecycle) holdersSurvive(ctx context.Context) {
	l.t.Helper()
	u, err := env.Admin.Dynamic.Resource(fencev1.GroupVersion.WithResource("fenceconfigs")).Get(ctx, fencev1.DefaultConfigName, metav1.GetOptions{})
	if err != nil {
		l.t.Fatal(err)
	}
	var got fencev1.FenceConfig
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &got); err != nil {
		l.t.Fatal(err)
	}
	if d := cmp.Diff(env.FenceConfigSpec().Hosts, got.Spec.Hosts); d != "" {
		l.t.Errorf("the upgrade changed the FenceConfig's hosts (-configured +after):\n%s", d)
	}
}

func TestInstallUpgradeAndUninstallAReleaseAndItsChart(t *testing.T) {
	requireInCluster(t)
	if env.InstallBundle == nil || env.MirrorRegistry == nil {
		t.Skipf("the %s provider cannot reinstall the bundle or point its nodes at a registry: lifecycle case not run (it runs with E2E_PROVIDER=kind)", env.Provider)
	}
	// Longer than testContext's 3 minutes: two releases, three installs
	// and three uninstalls, each waiting for its pods or its namespace.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	t.Cleanup(cancel)
	root := repoRoot(t)
	l := &lifecycle{t: t, root: root, bin: filepath.Join(root, "bin"), kubeconfig: filepath.Join(t.TempDir(), "kubeconfig")}
	if _, err := os.Stat(filepath.Join(l.bin, "helm")); err != nil {
		t.Fatalf("bin/helm: %v (make helm builds it from the Go module proxy; make e2e-kind does)", err)
	}
	if err := cluster.WriteKubeconfig(l.kubeconfig, map[string]*rest.Config{framework.ContextAdmin: env.Admin.Config}, framework.ContextAdmin); err != nil {
		t.Fatal(err)
	}

	// Two releases, v0.1.1's holder-epoch policy refusing one write more.
	dir := t.TempDir()
	// Built side by side: most of a build is linking, which takes one core.
	versions := []string{"v0.1.0", "v0.1.1"}
	rels := make([]*framework.Release, len(versions))
	errs := make([]error, len(versions))
	var wg sync.WaitGroup
	for i, v := range versions {
		wg.Go(func() {
			rels[i], errs[i] = framework.BuildRelease(ctx, root, v, releaseRegistry+"/"+releaseRepo, filepath.Join(dir, v), t.Logf)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	v1, v2 := rels[0], rels[1]
	if v1.Image == v2.Image {
		t.Fatalf("v0.1.0 and v0.1.1 pin the same image %s: the upgrade would not roll the webhook", v1.Image)
	}
	changeHolderEpochPolicy(t, v2)
	reg, err := framework.StartRegistry()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	for _, r := range rels {
		if err := reg.Push(ctx, r, releaseRepo); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.MirrorRegistry(ctx, releaseRegistry, reg.Port); err != nil {
		t.Fatal(err)
	}

	shipped, err := framework.RenderBundle(ctx, filepath.Join(l.bin, "kubectl"), root, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	// Whatever happens below, the suite's install is back afterwards.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		// A namespace still terminating refuses new content.
		err := framework.Eventually(ctx, 3*time.Minute, time.Second, "namespace "+framework.WebhookNamespace+" gone or live", func(ctx context.Context) (bool, string, error) {
			ns, err := env.Admin.Kube.CoreV1().Namespaces().Get(ctx, framework.WebhookNamespace, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				return true, "", nil
			case err != nil:
				return false, err.Error(), nil
			}
			return ns.DeletionTimestamp == nil, "terminating", nil
		})
		if err != nil {
			t.Errorf("reinstalling the suite's bundle: %v", err)
			return
		}
		if err := env.InstallBundle(ctx); err != nil {
			t.Errorf("reinstalling the suite's bundle: %v", err)
			return
		}
		if err := env.InstallBaseline(ctx, root); err != nil {
			t.Errorf("reinstalling the suite's baseline: %v", err)
			return
		}
		if err := env.WaitForEnforcement(ctx, t.Logf); err != nil {
			t.Errorf("the suite's bundle reinstalled, enforcement: %v", err)
		}
	})

	unrelated := startLoad(t, 1, append(unrelatedProbes(t), unrelatedPolicyProbe(t))...)
	unrelated.waitMore(t, 5)

	t.Log("uninstall the suite's install (docs/install.md, Uninstall)")
	l.run(ctx, nil, uninstallFirst)
	l.run(ctx, nil, [][]string{{"kubectl", "delete", "-k", "config/default", "--ignore-not-found"}})
	l.run(ctx, nil, [][]string{uninstallRest[0], uninstallRest[2]})
	l.gone(ctx, "config/default", shipped.Objects)

	t.Log("install v0.1.0 from its install.yaml (docs/install.md, Install from a release)")
	l.run(ctx, v1, installFromRelease)
	l.run(ctx, v1, configureRelease)
	l.ready(ctx, v1.Image, true)
	upgraded := upgradeMarker()
	if err := dryRunCreate(upgraded.As, upgraded.Obj)(ctx); err != nil {
		t.Fatalf("v0.1.0 refuses the write only v0.1.1 refuses: %v", err)
	}

	t.Log("upgrade to v0.1.1, whose holder-epoch policy changed (docs/install.md, Upgrade)")
	fenced := startLoad(t, 1, mustRefuseProbe(t, refused), fencedAdmitProbe(t))
	fenced.waitMore(t, 5)
	l.run(ctx, v2, upgradeRelease)
	if err := env.WaitDenied(ctx, upgraded, renderWait()); err != nil {
		t.Fatal(err)
	}
	l.ready(ctx, v2.Image, false)
	fenced.waitMore(t, 5)
	// The fence never opens while it upgrades: a write it refuses is refused
	// throughout. The valid host write's figures are reported, not
	// asserted (the rolling-restart case asserts them).
	fenced.report(t, "upgrade v0.1.0 to v0.1.1", func(p probe) bool { return p.want == refused })
	l.holdersSurvive(ctx)

	t.Log("uninstall v0.1.1 (docs/install.md, Uninstall)")
	v2objs, err := v2.Objects()
	if err != nil {
		t.Fatal(err)
	}
	l.run(ctx, v2, append(append([][]string{}, uninstallFirst...), uninstallRest...))
	l.gone(ctx, "v0.1.1's install.yaml", v2objs)

	t.Log("install v0.1.0's chart, upgrade to v0.1.1's, uninstall (docs/install.md, Install with Helm)")
	values := filepath.Join(dir, "values.yaml")
	writeValues(t, values)
	l.run(ctx, nil, chartNamespace)
	l.run(ctx, nil, [][]string{{"helm", "install", "sandbox-fence", v1.Chart(), "-n", "sandbox-fence-system", "--values", values, "--wait"}})
	l.ready(ctx, v1.Image, false)
	l.run(ctx, nil, [][]string{{"helm", "upgrade", "sandbox-fence", v2.Chart(), "-n", "sandbox-fence-system", "--values", values, "--wait"}})
	l.ready(ctx, v2.Image, false)
	l.reports(ctx, v2.ReportsImage)
	// Helm never upgrades crds/: the pre-upgrade hook applied v0.1.1's CRD.
	crd, err := env.Admin.Dynamic.Resource(framework.CRDGVR).Get(ctx, "fenceconfigs.fence.sandbox.namzu.ai", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := crd.GetLabels()["app.kubernetes.io/version"], strings.TrimPrefix(v2.Version, "v"); got != want {
		t.Errorf("after helm upgrade the CRD is labelled version %q, want %q: the chart's upgrade-crds hook did not apply it", got, want)
	}
	// The chart's crds/ are config/crd, the CRD the suite's bundle renders;
	// its hooks (helm get hooks) delete their Jobs and RBAC once they succeed.
	shippedCRDs, _, _ := shipped.Split()
	chartObjs := append(append(helmGet(ctx, l, "manifest"), helmGet(ctx, l, "hooks")...), shippedCRDs...)
	l.run(ctx, nil, uninstallChart)
	l.gone(ctx, "the chart", chartObjs)

	unrelated.waitMore(t, 5)
	unrelated.report(t, "install, upgrade, uninstall", allStrict)
}

// reports runs the chart's policy reports CronJob now, as `kubectl create
// job --from=cronjob/sandbox-fence-reports` does, and reads back the
// ClusterReport it writes: kubectl fence's image of the release, pulled,
// admitted in the restricted namespace, audits as its ServiceAccount and
// writes the reports.
func (l *lifecycle) reports(ctx context.Context, image string) {
	l.t.Helper()
	const ns, cronJob = "sandbox-fence-system", "sandbox-fence-reports"
	cj, err := env.Admin.Kube.BatchV1().CronJobs(ns).Get(ctx, cronJob, metav1.GetOptions{})
	if err != nil {
		l.t.Fatal(err)
	}
	if got := cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Image; got != image {
		l.t.Errorf("CronJob %s runs %s, want the release's %s", cronJob, got, image)
	}
	// No report before the job, none after the case: the one read back is
	// the job's.
	deleteReports := func() {
		if out, err := kubectlAs(l.t, env.Admin, nil, "delete", "reports,clusterreports", "-A", "-l", "app.kubernetes.io/managed-by="+fencectl.ReportManagedBy); err != nil {
			l.t.Errorf("delete the policy reports: %v\n%s", err, out)
		}
	}
	deleteReports()
	l.t.Cleanup(deleteReports)
	start := time.Now()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: cronJob + "-now", Namespace: ns,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cj, batchv1.SchemeGroupVersion.WithKind("CronJob"))}},
		Spec: cj.Spec.JobTemplate.Spec,
	}
	if _, err := env.Admin.Kube.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		l.t.Fatal(err)
	}
	err = framework.Eventually(ctx, 3*time.Minute, time.Second, "Job "+job.Name+" complete", func(ctx context.Context) (bool, string, error) {
		j, err := env.Admin.Kube.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		for _, c := range j.Status.Conditions {
			switch {
			case c.Status != corev1.ConditionTrue:
			case c.Type == batchv1.JobComplete:
				return true, "", nil
			case c.Type == batchv1.JobFailed:
				return false, "", fmt.Errorf("%s: %s", c.Reason, c.Message)
			}
		}
		return false, fmt.Sprintf("%d active, %d failed", j.Status.Active, j.Status.Failed), nil
	})
	if err != nil {
		pods, _ := env.Admin.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + job.Name})
		for _, p := range pods.Items {
			logs, _ := env.Admin.Kube.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
			l.t.Logf("pod %s (%s): %s", p.Name, p.Status.Phase, logs)
		}
		l.t.Fatal(err)
	}
	out, err := kubectlAs(l.t, env.Admin, nil, "get", "clusterreports", fencectl.ReportName)
	if err != nil {
		l.t.Fatalf("the reports job completed, but: kubectl get clusterreports %s: %v\n%s", fencectl.ReportName, err, out)
	}
	l.t.Logf("the reports job of %s completed in %s:\n%s", image, time.Since(start).Round(100*time.Millisecond), out)
}

// unrelatedPolicyProbe: an admin's CiliumNetworkPolicy in an opted-in
// namespace, a name no host writes: neither the egress policy (it
// evaluates ServiceAccounts) nor the webhook (it sees bound hosts) is about
// it, whatever state the install is in, so it is admitted throughout
// (no policy has a window after its CRD or an API server starts).
func unrelatedPolicyProbe(t *testing.T) probe {
	pol, err := env.PerSandboxPolicy(fence.OwnerKindSandboxClaim, "admin-owned", "00000000-0000-0000-0000-000000000001", []string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	pol.SetName(name("admin-egress"))
	return probe{name: "unrelated write (CiliumNetworkPolicy, admin)", want: admitted, send: dryRunCreate(env.Admin, pol)}
}

// upgradeMarker: the host's Sandbox carrying refusedFromV2, denied once
// v0.1.1's policy is enforced.
func upgradeMarker() framework.Marker {
	return framework.Marker{
		Name: "v0.1.1's holder-epoch policy",
		As:   env.Host,
		Obj:  framework.MakeSandbox(env.HostNamespace, name("upgrade")).Annotation(fence.AnnotationHolderEpoch, "1").Annotation(refusedFromV2, "x").Obj(),
		Want: "refused from v0.1.1 on",
	}
}

// changeHolderEpochPolicy gives the release's holder-epoch policy one more
// validation, as a release that tightens a rule would.
func changeHolderEpochPolicy(t *testing.T, r *framework.Release) {
	t.Helper()
	objs, err := framework.ReadYAMLFile(r.InstallYAML())
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	changed := false
	for _, o := range objs {
		if o.GetKind() == "ValidatingAdmissionPolicy" && o.GetName() == framework.PolicyHolderEpoch {
			vs, _, _ := unstructured.NestedSlice(o.Object, "spec", "validations")
			vs = append(vs, map[string]any{
				"expression": fmt.Sprintf("!has(object.metadata.annotations) || !(%q in object.metadata.annotations)", refusedFromV2),
				"message":    "refused from v0.1.1 on (the lifecycle case's policy change)",
			})
			if err := unstructured.SetNestedSlice(o.Object, vs, "spec", "validations"); err != nil {
				t.Fatal(err)
			}
			changed = true
		}
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		out.WriteString("---\n")
		out.Write(b)
	}
	if !changed {
		t.Fatalf("release %s has no ValidatingAdmissionPolicy %s", r.Version, framework.PolicyHolderEpoch)
	}
	if err := os.WriteFile(r.InstallYAML(), out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeValues writes the chart's values that bind the suite's hosts
// (fenceConfig: the FenceConfig's spec) and delete the CRD on uninstall.
func writeValues(t *testing.T, path string) {
	t.Helper()
	spec := env.FenceConfigSpec()
	b, err := yaml.Marshal(map[string]any{"fenceConfig": spec, "crds": map[string]any{"keep": false}, "policyReports": map[string]any{"enabled": true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// helmGet is what the chart's release holds: `helm get manifest` (its
// crds/ are not listed) or `helm get hooks`.
func helmGet(ctx context.Context, l *lifecycle, what string) []*unstructured.Unstructured {
	l.t.Helper()
	out, err := exec.CommandContext(ctx, filepath.Join(l.bin, "helm"), "get", what, "sandbox-fence", "-n", "sandbox-fence-system", "--kubeconfig", l.kubeconfig).Output()
	if err != nil {
		l.t.Fatalf("helm get %s: %v", what, err)
	}
	objs, err := framework.DecodeYAML(out)
	if err != nil {
		l.t.Fatal(err)
	}
	return objs
}

// The lifecycle case runs the commands docs/install.md gives; this keeps
// them there.
func TestTheLifecycleCommandsAreDocumented(t *testing.T) {
	root := repoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, set := range [][][]string{installFromRelease, configureRelease, upgradeRelease, uninstallFirst, uninstallRest, chartNamespace, uninstallChart} {
		for _, c := range set {
			if line := strings.Join(c, " "); !bytes.Contains(doc, []byte(line)) {
				t.Errorf("docs/install.md does not give the command the lifecycle case runs: %s", line)
			}
		}
	}
}
