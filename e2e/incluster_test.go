//go:build e2e

package e2e

// In-cluster cases: the webhook as config/default deploys it (a Deployment
// of two replicas behind its Service, a PodDisruptionBudget, cert-controller
// rotating its certificate), under the disruptions a cluster admin causes or
// suffers: a rolling restart, an eviction, a certificate rotation, draining
// a worker, losing a worker. They run wherever the provider deploys the
// shipped Deployment (kind: make e2e-kind, users' kind jobs); elsewhere each
// skips with the reason.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

const webhookNS = framework.WebhookNamespace

// requireInCluster skips a case that needs the shipped Deployment.
func requireInCluster(t *testing.T) {
	t.Helper()
	requireWebhook(t)
	if !env.InCluster {
		t.Skipf("the %s provider does not run the webhook as the shipped Deployment behind its Service: in-cluster case not run (it runs with E2E_PROVIDER=kind, make e2e-kind)", env.Provider)
	}
}

// requireOwnedNodes skips a case that drains or stops nodes.
func requireOwnedNodes(t *testing.T) {
	t.Helper()
	requireInCluster(t)
	if env.Nodes == nil {
		t.Skipf("the %s provider does not own the cluster's nodes (Env.Nodes is nil): drain and node-loss case not run (it runs with E2E_PROVIDER=kind, make e2e-kind)", env.Provider)
	}
}

func webhookDeployment(t *testing.T) *appsv1.Deployment {
	t.Helper()
	d, err := env.Admin.Kube.AppsV1().Deployments(webhookNS).Get(context.Background(), framework.WebhookName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// webhookPods lists the webhook's pods that are not being deleted.
func webhookPods(t *testing.T) []corev1.Pod {
	t.Helper()
	pods, err := env.Admin.Kube.CoreV1().Pods(webhookNS).List(context.Background(), metav1.ListOptions{LabelSelector: framework.WebhookPodSelector})
	if err != nil {
		t.Fatal(err)
	}
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	return live
}

// --- steady load -----------------------------------------------------------

// outcome is what one request of a probe is expected to get.
type outcome int

const (
	// admitted: the write must go through.
	admitted outcome = iota
	// deniedByWebhook: the webhook's own 422 (cilium-fence:), nothing else.
	deniedByWebhook
	// refused: anything but admitted (the webhook's denial, or failurePolicy
	// Fail refusing it when no replica answers).
	refused
)

// probe is one kind of write the load keeps sending, all dry-run: nothing
// accumulates, while every admission plugin and webhook still runs.
type probe struct {
	name string
	want outcome
	send func(ctx context.Context) error
}

type probeStats struct {
	total, asExpected, denied atomic.Int64
	mu                        sync.Mutex
	samples                   []string
}

// load keeps one worker per probe sending its write and counts every
// answer against what the probe expects.
type load struct {
	workers int
	probes  []probe
	stats   []*probeStats
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	start   time.Time
}

func startLoad(t *testing.T, workersPerProbe int, probes ...probe) *load {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{workers: workersPerProbe, probes: probes, cancel: cancel, start: time.Now()}
	for _, p := range probes {
		st := &probeStats{}
		l.stats = append(l.stats, st)
		for range workersPerProbe {
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				for ctx.Err() == nil {
					reqCtx, done := context.WithTimeout(ctx, 30*time.Second)
					err := p.send(reqCtx)
					done()
					if ctx.Err() != nil {
						return // the answer to a request we cancelled says nothing
					}
					st.total.Add(1)
					v := framework.VerdictOf(err)
					isDenial := !v.Admitted && apierrors.IsInvalid(err) && strings.Contains(err.Error(), "cilium-fence:")
					if isDenial {
						st.denied.Add(1)
					}
					ok := false
					switch p.want {
					case admitted:
						ok = err == nil
					case deniedByWebhook:
						ok = isDenial
					case refused:
						ok = err != nil
					}
					if ok {
						st.asExpected.Add(1)
						continue
					}
					st.mu.Lock()
					if len(st.samples) < 8 {
						what := "admitted"
						if err != nil {
							what = err.Error()
						}
						st.samples = append(st.samples, fmt.Sprintf("+%s %s", time.Since(l.start).Round(time.Millisecond), what))
					}
					st.mu.Unlock()
				}
			}()
		}
	}
	t.Cleanup(l.stop)
	return l
}

// waitMore waits until every probe had n more answers: the load ran
// across whatever happened before this call.
func (l *load) waitMore(t *testing.T, n int64) {
	t.Helper()
	targets := make([]int64, len(l.stats))
	for i, s := range l.stats {
		targets[i] = s.total.Load() + n
	}
	if err := framework.Eventually(context.Background(), 2*time.Minute, 20*time.Millisecond, fmt.Sprintf("%d more answers to every probe", n), func(context.Context) (bool, string, error) {
		for i, s := range l.stats {
			if s.total.Load() < targets[i] {
				return false, fmt.Sprintf("%s: %d of %d", l.probes[i].name, s.total.Load(), targets[i]), nil
			}
		}
		return true, "", nil
	}); err != nil {
		t.Fatal(err)
	}
}

func (l *load) stop() {
	l.cancel()
	l.wg.Wait()
}

// report stops the load, prints one line of figures per probe and fails
// the test for every probe marked strict that got an unexpected answer.
func (l *load) report(t *testing.T, scenario string, strict func(p probe) bool) {
	t.Helper()
	l.stop()
	t.Logf("%s: %s of steady load (%d probes, %d workers each)", scenario, time.Since(l.start).Round(100*time.Millisecond), len(l.probes), l.workers)
	for i, p := range l.probes {
		s := l.stats[i]
		total, good := s.total.Load(), s.asExpected.Load()
		t.Logf("FIGURE %s | %s | %d requests | %d as expected | %d not | %d denied by the webhook", scenario, p.name, total, good, total-good, s.denied.Load())
		if total == 0 {
			t.Errorf("%s: probe %s sent nothing", scenario, p.name)
		}
		if strict(p) && good != total {
			t.Errorf("%s: %s: %d of %d answers were not what the probe expects; first ones:\n%s", scenario, p.name, total-good, total, strings.Join(s.samples, "\n"))
		}
	}
}

func allStrict(probe) bool { return true }

// waitFencedPathAdmits waits, before a case starts its strict load, until
// the bound host's valid policy write is admitted three times in a row,
// and logs how long that took: a case that asserts every valid write is
// admitted across its own disruption starts from a cluster where they are
// (RELIABILITY.md finding 8: after kube-apiserver restarts on kind, the
// webhook's live owner reads went unanswered for up to a minute). Only
// answers a client retries are waited out; a verdict (a 422) refusing the
// valid write fails the case.
func waitFencedPathAdmits(t *testing.T) {
	t.Helper()
	send := fencedAdmitProbe(t).send
	start, inRow, refused := time.Now(), 0, 0
	var first string
	err := framework.Eventually(context.Background(), 3*time.Minute, 250*time.Millisecond, "the host's valid policy write admitted 3 times in a row", func(ctx context.Context) (bool, string, error) {
		reqCtx, done := context.WithTimeout(ctx, 30*time.Second)
		err := send(reqCtx)
		done()
		if err != nil {
			inRow = 0
			refused++
			if first == "" {
				first = err.Error()
			}
			if v := framework.VerdictOf(err); v.By != "" && !fence.IsTransient(err) {
				t.Errorf("before the case: the host's valid policy write was refused with a verdict, not a retryable answer: %v", err)
			}
			return false, err.Error(), nil
		}
		inRow++
		return inRow >= 3, "", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if refused > 0 {
		t.Logf("FIGURE settle | the fenced path admitted 3 writes in a row after %s; %d refused before, the first: %s", time.Since(start).Round(100*time.Millisecond), refused, first)
	}
}

// webhookMarker is the write only the webhook refuses: a well-formed
// per-sandbox policy whose owner does not exist, by the
// bound host.
func webhookMarker(t *testing.T) framework.Marker {
	t.Helper()
	ms, err := env.Markers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Name == "webhook" {
			return m
		}
	}
	t.Fatal("the framework returned no webhook marker")
	return framework.Marker{}
}

func dryRunCreate(id *framework.Identity, obj *unstructured.Unstructured) func(context.Context) error {
	return func(ctx context.Context) error {
		mapper, err := env.Mapper()
		if err != nil {
			return err
		}
		ri, err := framework.ResourceFor(mapper, id.Dynamic, obj)
		if err != nil {
			return err
		}
		_, err = ri.Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: framework.FieldManager})
		return err
	}
}

// mustRefuseProbe: the bound host writing a policy for an owner that does
// not exist; the webhook denies it.
func mustRefuseProbe(t *testing.T, want outcome) probe {
	m := webhookMarker(t)
	return probe{name: "fenced write that must be refused (policy for a missing owner)", want: want, send: dryRunCreate(m.As, m.Obj)}
}

// fencedAdmitProbe: the bound host writing the policy of its own claim;
// only an answering webhook admits it.
func fencedAdmitProbe(t *testing.T) probe {
	claim := hostClaim(t)
	pol, err := env.PerSandboxPolicy(fence.OwnerKindSandboxClaim, claim.GetName(), string(claim.GetUID()), []string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	return probe{name: "fenced write that must be admitted (policy of its own claim)", want: admitted, send: dryRunCreate(env.Host, pol)}
}

// unrelatedProbes: writes the webhook is never asked about (a ConfigMap;
// a Sandbox, which only the holder-epoch policy checks).
func unrelatedProbes(t *testing.T) []probe {
	cm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name("load"), "namespace": env.HostNamespace},
		"data":     map[string]any{"k": "v"},
	}}
	sbx := framework.MakeSandbox(env.HostNamespace, name("load")).Annotation(fence.AnnotationHolderEpoch, "1").Obj()
	return []probe{
		{name: "unrelated write (ConfigMap, admin)", want: admitted, send: dryRunCreate(env.Admin, cm)},
		{name: "unrelated write (Sandbox, host)", want: admitted, send: dryRunCreate(env.Host, sbx)},
	}
}

// --- placement and Service ----------------------------------------------------

// Two replicas on two nodes, behind the Service the configuration names,
// with the caBundle cert-controller injected: what keeps admission up when
// one node goes.
func TestInClusterWebhookRunsOnTwoNodesBehindItsService(t *testing.T) {
	requireInCluster(t)
	ctx := testContext(t)
	vwc, err := env.Admin.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, framework.WebhookConfigName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range vwc.Webhooks {
		svc := w.ClientConfig.Service
		if w.ClientConfig.URL != nil || svc == nil || svc.Namespace != webhookNS || svc.Name != framework.WebhookName {
			t.Errorf("webhook %s: clientConfig %+v, want the Service %s/%s as shipped", w.Name, w.ClientConfig, webhookNS, framework.WebhookName)
		}
		if len(w.ClientConfig.CABundle) == 0 {
			t.Errorf("webhook %s: no caBundle: cert-controller did not inject one", w.Name)
		}
	}
	// The shipped PriorityClass (config/webhook/base/deployment.yaml),
	// resolved by the API server's Priority admission plugin: the pods are
	// preempted and evicted last, like the cluster's own controllers.
	critical, err := env.Admin.Kube.SchedulingV1().PriorityClasses().Get(ctx, "system-cluster-critical", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podIPs := map[string]string{}
	nodes := map[string]bool{}
	for _, p := range webhookPods(t) {
		podIPs[p.Status.PodIP] = p.Name
		nodes[p.Spec.NodeName] = true
		if p.Spec.PriorityClassName != critical.Name || p.Spec.Priority == nil || *p.Spec.Priority != critical.Value {
			t.Errorf("pod %s: priorityClassName %q, priority %v; want %s (%d), as config/webhook ships it",
				p.Name, p.Spec.PriorityClassName, p.Spec.Priority, critical.Name, critical.Value)
		}
	}
	eps, err := framework.ReadyWebhookEndpoints(ctx, env.Admin.Kube)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range eps {
		if podIPs[e.Address] == "" {
			t.Errorf("ready endpoint %s is not the address of a webhook pod (%v)", e.Address, podIPs)
		}
	}
	ready := len(eps)
	d := webhookDeployment(t)
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Fatalf("the shipped Deployment runs %v replicas; losing one must not stop admissions, so it needs at least 2", d.Spec.Replicas)
	}
	if ready != int(*d.Spec.Replicas) {
		t.Errorf("%d ready endpoints, want one per replica (%d)", ready, *d.Spec.Replicas)
	}
	if len(nodes) < 2 {
		t.Errorf("the webhook's pods run on %d node(s) %v: the required spread of config/webhook must put two replicas on two nodes", len(nodes), keys(nodes))
	}
	m := webhookMarker(t)
	if err := dryRunCreate(m.As, m.Obj)(ctx); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "cilium-fence:") {
		t.Fatalf("the in-cluster webhook did not deny a policy for a missing owner: %v", err)
	}
	t.Logf("%d ready endpoints on nodes %v; the apiserver called the webhook through the Service and obeyed its denial", ready, keys(nodes))
}

func keys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// --- rolling restart, eviction ---------------------------------------------------

// restartWebhookRollout does what `kubectl rollout restart` does and waits
// until the new pods are available and the old ones gone.
func restartWebhookRollout(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	before := map[string]bool{}
	for _, p := range webhookPods(t) {
		before[p.Name] = true
	}
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
	if _, err := env.Admin.Kube.AppsV1().Deployments(webhookNS).Patch(ctx, framework.WebhookName, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: framework.FieldManager}); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitWebhookRolledOut(ctx, env, 3*time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, framework.WebhookPodReport(ctx, env))
	}
	waitPodsGone(t, before)
}

func TestRollingRestartUnderLoadFailsNoAdmission(t *testing.T) {
	requireInCluster(t)
	logs := followWebhookLogs(t)
	waitFencedPathAdmits(t)
	l := startLoad(t, 2, mustRefuseProbe(t, deniedByWebhook), fencedAdmitProbe(t))
	l.waitMore(t, 10)
	start := time.Now()
	restartWebhookRollout(t)
	t.Logf("rollout done and old pods gone in %s", time.Since(start).Round(100*time.Millisecond))
	l.waitMore(t, 10)
	defer logs.report(t, liveReadRetried)
	l.report(t, "rolling restart", allStrict)
}

// liveReadRetried starts what a webhook pod logs when a live owner read got
// no answer within its attempt timeout and is retried on a new connection,
// and how a retried read ended (internal/webhook CachedOwners.liveGet;
// RELIABILITY.md finding 8).
const liveReadRetried = "live owner read "

// webhookLogs holds the logs of the webhook's pods during a case: those
// running when it began are followed, since a rollout deletes them and
// their logs with them, and those running at its end are read then.
type webhookLogs struct {
	mu   sync.Mutex
	pods map[string]*bytes.Buffer
}

// logsUnread starts the line that stands in for a pod's logs that could not
// be read, so that report shows it.
const logsUnread = "e2e: the logs could not be read: "

func followWebhookLogs(t *testing.T) *webhookLogs {
	t.Helper()
	w := &webhookLogs{pods: map[string]*bytes.Buffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for _, p := range webhookPods(t) {
		buf := &bytes.Buffer{}
		w.pods[p.Name] = buf
		go func(name string) {
			stream, err := env.Admin.Kube.CoreV1().Pods(webhookNS).GetLogs(name, &corev1.PodLogOptions{Follow: true}).Stream(ctx)
			if err != nil {
				w.mu.Lock()
				fmt.Fprintf(buf, "%s%v\n", logsUnread, err)
				w.mu.Unlock()
				return
			}
			defer stream.Close()
			chunk := make([]byte, 32<<10)
			for {
				n, err := stream.Read(chunk)
				w.mu.Lock()
				buf.Write(chunk[:n])
				w.mu.Unlock()
				if err != nil {
					return
				}
			}
		}(p.Name)
	}
	return w
}

// report logs how many lines of the pods' logs contain marker, and the
// first ones, with the pod that wrote them. Pods still running are read
// now; the followed ones that are gone have ended their streams.
func (w *webhookLogs) report(t *testing.T, marker string) {
	t.Helper()
	for _, p := range webhookPods(t) {
		if _, followed := w.pods[p.Name]; followed {
			continue
		}
		raw, err := env.Admin.Kube.CoreV1().Pods(webhookNS).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(context.Background())
		if err != nil {
			raw = []byte(logsUnread + err.Error() + "\n")
		}
		w.mu.Lock()
		w.pods[p.Name] = bytes.NewBuffer(raw)
		w.mu.Unlock()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var found []string
	names := make([]string, 0, len(w.pods))
	for name := range w.pods {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for _, line := range strings.Split(w.pods[name].String(), "\n") {
			if strings.Contains(line, marker) || strings.HasPrefix(line, logsUnread) {
				found = append(found, name+": "+line)
			}
		}
	}
	t.Logf("webhook logs of %d pods: %d lines with %q", len(names), len(found), marker)
	for i, line := range found {
		if i == 5 {
			t.Logf("  ... %d more", len(found)-i)
			break
		}
		t.Logf("  %s", line)
	}
}

func waitPodsGone(t *testing.T, names map[string]bool) {
	t.Helper()
	if err := framework.Eventually(context.Background(), 3*time.Minute, 250*time.Millisecond, "old webhook pods gone", func(ctx context.Context) (bool, string, error) {
		pods, err := env.Admin.Kube.CoreV1().Pods(webhookNS).List(ctx, metav1.ListOptions{LabelSelector: framework.WebhookPodSelector})
		if err != nil {
			return false, err.Error(), nil
		}
		var left []string
		for _, p := range pods.Items {
			if names[p.Name] {
				left = append(left, p.Name)
			}
		}
		return len(left) == 0, fmt.Sprintf("still there: %v", left), nil
	}); err != nil {
		t.Fatal(err)
	}
}

// waitPDBAllows waits until the disruption controller counts every replica
// healthy, so exactly one voluntary disruption is allowed.
func waitPDBAllows(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	pdbs, err := env.Admin.Kube.PolicyV1().PodDisruptionBudgets(webhookNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pdbs.Items) == 0 {
		t.Fatalf("no PodDisruptionBudget in %s: config/default must ship one", webhookNS)
	}
	pdb := pdbs.Items[0].Name
	want := *webhookDeployment(t).Spec.Replicas
	if err := framework.Eventually(ctx, 2*time.Minute, 250*time.Millisecond, "PDB allows one disruption", func(ctx context.Context) (bool, string, error) {
		p, err := env.Admin.Kube.PolicyV1().PodDisruptionBudgets(webhookNS).Get(ctx, pdb, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		return p.Status.DisruptionsAllowed >= 1 && p.Status.CurrentHealthy == want,
			fmt.Sprintf("allowed %d healthy %d", p.Status.DisruptionsAllowed, p.Status.CurrentHealthy), nil
	}); err != nil {
		t.Fatal(err)
	}
	return pdb
}

func evict(ctx context.Context, pod corev1.Pod) error {
	return env.Admin.Kube.PolicyV1().Evictions(pod.Namespace).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace}})
}

func TestEvictingOneReplicaKeepsAdmissionsFlowing(t *testing.T) {
	requireInCluster(t)
	ctx := testContext(t)
	pdb := waitPDBAllows(t)
	pods := webhookPods(t)
	if len(pods) < 2 {
		t.Fatalf("%d webhook pods, want at least 2", len(pods))
	}
	waitFencedPathAdmits(t)
	l := startLoad(t, 2, mustRefuseProbe(t, deniedByWebhook), fencedAdmitProbe(t))
	l.waitMore(t, 10)
	if err := evict(ctx, pods[0]); err != nil {
		t.Fatalf("evicting %s with the PDB allowing one disruption: %v", pods[0].Name, err)
	}
	// The budget is spent: a second voluntary disruption must be refused
	// until the replacement is healthy.
	if err := evict(ctx, pods[1]); !apierrors.IsTooManyRequests(err) {
		t.Errorf("evicting the second replica %s right after the first: got %v, want 429 from PDB %s", pods[1].Name, err, pdb)
	}
	waitPodsGone(t, map[string]bool{pods[0].Name: true})
	if err := framework.WaitWebhookRolledOut(ctx, env, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	l.waitMore(t, 10)
	l.report(t, "one replica evicted", allStrict)
}

// --- certificate rotation ----------------------------------------------------------

func TestCertControllerRotatesTheServingCertificateEndToEnd(t *testing.T) {
	requireInCluster(t)
	ctx := testContext(t)
	m := webhookMarker(t)
	secretName := certSecret(t)
	secrets := env.Admin.Kube.CoreV1().Secrets(webhookNS)
	old, err := secrets.Get(ctx, secretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	oldCA := old.Data["ca.crt"]
	if len(oldCA) == 0 {
		t.Fatalf("Secret %s/%s has no ca.crt: cert-controller has not filled it", webhookNS, secretName)
	}
	waitCAEverywhere(t, oldCA)

	// Force a rotation the way an admin does when a key may have leaked:
	// empty the Secret; cert-controller sees an invalid CA and issues a new
	// CA and serving certificate, then injects the new caBundle.
	start := time.Now()
	old.Data = map[string][]byte{}
	if _, err := secrets.Update(ctx, old, metav1.UpdateOptions{FieldManager: framework.FieldManager}); err != nil {
		t.Fatal(err)
	}
	var newCA []byte
	if err := framework.Eventually(ctx, 2*time.Minute, 250*time.Millisecond, "cert-controller issued a new CA", func(ctx context.Context) (bool, string, error) {
		s, err := secrets.Get(ctx, secretName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		newCA = s.Data["ca.crt"]
		return len(newCA) > 0 && !bytes.Equal(newCA, oldCA) && len(s.Data["tls.crt"]) > 0, "ca.crt unchanged or empty", nil
	}); err != nil {
		t.Fatal(err)
	}
	waitCAEverywhere(t, newCA)
	deny := dryRunCreate(m.As, m.Obj)
	if err := framework.Eventually(ctx, time.Minute, 250*time.Millisecond, "webhook answers with the new certificate", func(ctx context.Context) (bool, string, error) {
		err := deny(ctx)
		return apierrors.IsInvalid(err), fmt.Sprint(err), nil
	}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := deny(ctx); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "cilium-fence:") {
			t.Fatalf("admission %d after rotation: %v, want the webhook's denial", i, err)
		}
	}
	t.Logf("rotation observed end to end in %s: new CA in the Secret, in every webhook's caBundle, and served by every pod", time.Since(start).Round(100*time.Millisecond))
}

// certSecret is the Secret cert-controller keeps the serving certificate
// in, which the webhook writes into its --cert-dir (--cert-secret-name).
func certSecret(t *testing.T) string {
	t.Helper()
	for _, c := range webhookDeployment(t).Spec.Template.Spec.Containers {
		for _, a := range c.Args {
			if name, ok := strings.CutPrefix(a, "--cert-secret-name="); ok {
				return name
			}
		}
	}
	t.Fatal("the webhook Deployment passes no --cert-secret-name: where does cert-controller put the certificate?")
	return ""
}

// waitCAEverywhere waits until ca is the caBundle of every webhook and every
// ready webhook pod serves a certificate that chains to it.
func waitCAEverywhere(t *testing.T, ca []byte) {
	t.Helper()
	ctx := context.Background()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("ca.crt is not PEM: %q", ca)
	}
	port := servingPort(t)
	err := framework.Eventually(ctx, 3*time.Minute, 500*time.Millisecond, "new CA injected and served", func(ctx context.Context) (bool, string, error) {
		vwc, err := env.Admin.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, framework.WebhookConfigName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		for _, w := range vwc.Webhooks {
			if !bytes.Equal(bytes.TrimSpace(w.ClientConfig.CABundle), bytes.TrimSpace(ca)) {
				return false, "caBundle of " + w.Name + " is not the Secret's CA", nil
			}
		}
		for _, p := range webhookPods(t) {
			if p.Status.PodIP == "" {
				continue
			}
			if why := servesChainTo(ctx, p.Name, port, pool); why != "" {
				return false, "pod " + p.Name + ": " + why, nil
			}
		}
		return true, "", nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// servesChainTo reaches the pod's serving port through the apiserver's
// port-forward (the suite may run where pod addresses are not routed, as
// with kind) and verifies its certificate against pool for the Service's
// DNS name, as the apiserver does.
func servesChainTo(ctx context.Context, pod string, port int, pool *x509.CertPool) string {
	addr, stop, err := forwardPort(ctx, pod, port)
	if err != nil {
		return "port-forward: " + err.Error()
	}
	defer stop()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{InsecureSkipVerify: true}) //nolint:gosec // verified below against the expected CA
	if err != nil {
		return err.Error()
	}
	defer conn.Close()
	certs := conn.ConnectionState().PeerCertificates
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err = certs[0].Verify(x509.VerifyOptions{
		Roots: pool, Intermediates: inter,
		DNSName: framework.WebhookName + "." + webhookNS + ".svc",
	})
	if err != nil {
		return fmt.Sprintf("serves %s (serial %s): %v", certs[0].Subject.CommonName, certs[0].SerialNumber, err)
	}
	return ""
}

// forwardPort opens a local port forwarded to the webhook pod's port.
func forwardPort(ctx context.Context, pod string, port int) (string, func(), error) {
	return env.ForwardPort(ctx, webhookNS, pod, port)
}

// servingPort is the container port the Service sends webhook calls to.
func servingPort(t *testing.T) int {
	t.Helper()
	svc, err := env.Admin.Kube.CoreV1().Services(webhookNS).Get(context.Background(), framework.WebhookName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(svc.Spec.Ports) == 0 {
		t.Fatal("the webhook Service has no ports")
	}
	tp := svc.Spec.Ports[0].TargetPort
	if tp.IntValue() != 0 {
		return tp.IntValue()
	}
	for _, c := range webhookDeployment(t).Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == tp.String() {
				return int(p.ContainerPort)
			}
		}
	}
	if tp.String() == "" {
		return int(svc.Spec.Ports[0].Port)
	}
	t.Fatalf("targetPort %s matches no container port", tp.String())
	return 0
}

// --- drain and node loss -------------------------------------------------------------

// spreadReplicas makes sure the webhook's replicas run on different nodes
// (a drain earlier may have put both on one; a new rollout spreads them
// again, the spread being counted per revision) and returns node -> pod.
func spreadReplicas(t *testing.T) map[string]string {
	t.Helper()
	m := spreadOf(t)
	if len(m) < 2 {
		t.Logf("the webhook's replicas share node(s) %v: restarting the rollout to spread them", keys(m))
		restartWebhookRollout(t)
		m = spreadOf(t)
	}
	if len(m) < 2 {
		t.Fatalf("the webhook's replicas run on %v: this case needs them on two workers (kind.yaml ships two)", m)
	}
	return m
}

// Draining a worker that runs a replica, as `kubectl drain` does (cordon,
// then evict every pod through the Eviction API, retrying while the
// PodDisruptionBudget refuses), fails no admission under steady load.
func TestDrainingAWorkerFailsNoAdmission(t *testing.T) {
	requireOwnedNodes(t)
	ctx := testContext(t)
	placement := spreadReplicas(t)
	waitPDBAllows(t)
	var node string
	for n := range placement {
		node = n
		break
	}
	probes := append([]probe{mustRefuseProbe(t, deniedByWebhook), fencedAdmitProbe(t)}, unrelatedProbes(t)...)
	waitFencedPathAdmits(t)
	l := startLoad(t, 1, probes...)
	l.waitMore(t, 10)
	start := time.Now()
	setUnschedulable(t, node, true)
	t.Cleanup(func() { setUnschedulable(t, node, false) })
	pdbRefusals := 0
	err := framework.Eventually(ctx, 3*time.Minute, 500*time.Millisecond, "node "+node+" drained", func(ctx context.Context) (bool, string, error) {
		pods, err := env.Admin.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return false, err.Error(), nil
		}
		var left []string
		for _, p := range pods.Items {
			if drainSkips(p) {
				continue
			}
			left = append(left, p.Namespace+"/"+p.Name)
			if p.DeletionTimestamp != nil {
				continue
			}
			switch err := evict(ctx, p); {
			case apierrors.IsTooManyRequests(err):
				pdbRefusals++
			case err != nil && !apierrors.IsNotFound(err):
				return false, "", fmt.Errorf("evicting %s/%s: %w", p.Namespace, p.Name, err)
			}
		}
		return len(left) == 0, fmt.Sprintf("left: %v", left), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitWebhookRolledOut(ctx, env, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s drained in %s (%d evictions refused by a PodDisruptionBudget and retried); webhook pods now on %v",
		node, time.Since(start).Round(100*time.Millisecond), pdbRefusals, keys(spreadOf(t)))
	l.waitMore(t, 10)
	l.report(t, "drain "+node, allStrict)
	for n := range spreadOf(t) {
		if n == node {
			t.Errorf("a webhook pod runs on the cordoned node %s", node)
		}
	}
}

// spreadOf is the webhook's pods by node: node -> pod.
func spreadOf(t *testing.T) map[string]string {
	m := map[string]string{}
	for _, p := range webhookPods(t) {
		m[p.Spec.NodeName] = p.Name
	}
	return m
}

// drainSkips lists what `kubectl drain --ignore-daemonsets` leaves: pods of
// a DaemonSet and mirror (static) pods.
func drainSkips(p corev1.Pod) bool {
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return true
	}
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

func setUnschedulable(t *testing.T, node string, on bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%v}}`, on)
	if _, err := env.Admin.Kube.CoreV1().Nodes().Patch(context.Background(), node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: framework.FieldManager}); err != nil {
		t.Errorf("cordon=%v %s: %v", on, node, err)
	}
}

// Losing a worker that runs a replica outright (its node container killed,
// no drain, no graceful shutdown): every fenced write that must be refused
// stays refused, by the remaining replica's denial or by failurePolicy
// Fail while the apiserver still sends calls to the lost one; writes the
// webhook is not asked about keep succeeding. The host's own legitimate
// policy writes may fail while the lost replica is still an endpoint (fail
// closed): their figure is printed, not required.
func TestLosingAWorkerKeepsRefusingAndAdmitting(t *testing.T) {
	requireOwnedNodes(t)
	ctx := testContext(t)
	placement := spreadReplicas(t)
	var node string
	for n := range placement {
		node = n
		break
	}
	fenced := fencedAdmitProbe(t)
	probes := append([]probe{mustRefuseProbe(t, refused), fenced}, unrelatedProbes(t)...)
	l := startLoad(t, 1, probes...)
	l.waitMore(t, 10)
	start := time.Now()
	if err := env.Nodes.Stop(ctx, node); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			if err := env.Nodes.Start(context.Background(), node); err != nil {
				t.Errorf("restarting node %s: %v", node, err)
			}
		}
	})
	// The lost replica stops being an endpoint once the node controller
	// marks the node unreachable and its pods not ready: then every fenced
	// write is answered by the other replica again.
	if err := framework.Eventually(ctx, 3*time.Minute, 250*time.Millisecond, "the lost replica's endpoint removed", func(ctx context.Context) (bool, string, error) {
		eps, err := framework.ReadyWebhookEndpoints(ctx, env.Admin.Kube)
		if err != nil {
			return false, err.Error(), nil
		}
		for _, e := range eps {
			if e.Node == node {
				return false, "still a ready endpoint on " + node, nil
			}
		}
		return true, "", nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s lost; its replica stopped being a ready endpoint after %s", node, time.Since(start).Round(100*time.Millisecond))
	l.waitMore(t, 20)
	l.report(t, "node loss "+node, func(p probe) bool { return p.name != fenced.name })

	// Bring the node back so the cases after this one find the cluster whole.
	if err := env.Nodes.Start(ctx, node); err != nil {
		t.Fatal(err)
	}
	restarted = true
	if err := framework.WaitWebhookRolledOut(ctx, env, 5*time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, framework.WebhookPodReport(ctx, env))
	}
	t.Logf("node %s back and the webhook rolled out again %s after the loss", node, time.Since(start).Round(100*time.Millisecond))
}
