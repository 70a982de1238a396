//go:build e2e_node

package suite

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/e2e/node"
)

const ns = framework.WebhookNamespace

// webhookMarker is the request only the webhook denies: a well-formed
// per-sandbox policy whose owner does not exist (contract §4.4), sent dry-run by
// the bound host. Every call must come back as the webhook's denial.
func webhookMarker(t *testing.T) framework.Marker {
	t.Helper()
	if !env.WebhookInstalled {
		// config/default ships the webhook; an overlay without it is a
		// broken bundle for this suite, not a case to skip.
		t.Fatalf("%s deploys no webhook (no ValidatingWebhookConfiguration %s)", node.OverlayDir, framework.WebhookConfigName)
	}
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

// admitOnce sends the marker once; "" means the webhook answered with its
// denial, anything else describes a failed admission.
func admitOnce(ctx context.Context, m framework.Marker) string {
	mapper, err := env.Mapper()
	if err != nil {
		return err.Error()
	}
	ri, err := framework.ResourceFor(mapper, m.As.Dynamic, m.Obj)
	if err != nil {
		return err.Error()
	}
	_, err = ri.Create(ctx, m.Obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: framework.FieldManager})
	switch {
	case err == nil:
		return "admitted (the webhook was not consulted or allowed it)"
	case strings.Contains(err.Error(), "denied the request") && strings.Contains(err.Error(), "cilium-fence:"):
		return ""
	default:
		return err.Error()
	}
}

// load keeps workers sending the marker and counts every answer that is not
// the webhook's denial: a connection refused by a stopping pod, a timeout or
// a TLS error would each be an admission the cluster failed to make.
type load struct {
	total, failed atomic.Int64
	mu            sync.Mutex
	samples       []string
	cancel        context.CancelFunc
	wg            sync.WaitGroup
}

func startLoad(t *testing.T, workers int) *load {
	t.Helper()
	m := webhookMarker(t)
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{cancel: cancel}
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for ctx.Err() == nil {
				res := admitOnce(ctx, m)
				if ctx.Err() != nil {
					return // the answer to a request we cancelled says nothing
				}
				l.total.Add(1)
				if res != "" {
					l.failed.Add(1)
					l.mu.Lock()
					if len(l.samples) < 10 {
						l.samples = append(l.samples, time.Now().Format("15:04:05.000")+" "+res)
					}
					l.mu.Unlock()
				}
			}
		}()
	}
	t.Cleanup(l.stop)
	return l
}

// waitTotal waits until n more requests have been answered: load ran across
// whatever happened before this call.
func (l *load) waitTotal(t *testing.T, n int64) {
	t.Helper()
	target := l.total.Load() + n
	if err := framework.Eventually(context.Background(), time.Minute, 20*time.Millisecond, fmt.Sprintf("%d more admissions answered", n), func(context.Context) (bool, string, error) {
		return l.total.Load() >= target, fmt.Sprintf("%d of %d", l.total.Load(), target), nil
	}); err != nil {
		t.Fatal(err)
	}
}

func (l *load) stop() {
	l.cancel()
	l.wg.Wait()
}

func (l *load) report(t *testing.T, what string) {
	t.Helper()
	l.stop()
	total, failed := l.total.Load(), l.failed.Load()
	t.Logf("%s: %d admissions under load, %d failed", what, total, failed)
	if failed != 0 {
		t.Errorf("%s: %d of %d admissions failed; first ones:\n%s", what, failed, total, strings.Join(l.samples, "\n"))
	}
}

func kube() *framework.Identity { return env.Admin }

func deployment(t *testing.T) *appsv1.Deployment {
	t.Helper()
	d, err := kube().Kube.AppsV1().Deployments(ns).Get(context.Background(), framework.WebhookName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func webhookPods(t *testing.T) []corev1.Pod {
	t.Helper()
	d := deployment(t)
	sel := metav1.FormatLabelSelector(d.Spec.Selector)
	pods, err := kube().Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

func TestWebhookServedInClusterThroughItsService(t *testing.T) {
	ctx := context.Background()
	m := webhookMarker(t)
	vwc, err := kube().Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, framework.WebhookConfigName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range vwc.Webhooks {
		svc := w.ClientConfig.Service
		if w.ClientConfig.URL != nil || svc == nil || svc.Namespace != ns || svc.Name != framework.WebhookName {
			t.Errorf("webhook %s: clientConfig %+v, want the Service %s/%s as shipped", w.Name, w.ClientConfig, ns, framework.WebhookName)
		}
		if len(w.ClientConfig.CABundle) == 0 {
			t.Errorf("webhook %s: no caBundle: cert-controller did not inject one", w.Name)
		}
	}
	// The Service's endpoints are the webhook pods, running on our node
	// with pod-network addresses: the apiserver's calls went there.
	_, podNet, _ := net.ParseCIDR(node.PodCIDR)
	slices, err := kube().Kube.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + framework.WebhookName})
	if err != nil {
		t.Fatal(err)
	}
	ready := 0
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || !*e.Conditions.Ready {
				continue
			}
			for _, a := range e.Addresses {
				if !podNet.Contains(net.ParseIP(a)) {
					t.Errorf("endpoint %s is not a pod address in %s", a, node.PodCIDR)
				}
				ready++
			}
			if e.NodeName == nil || *e.NodeName != node.NodeName {
				t.Errorf("endpoint %v is not on node %s", e.Addresses, node.NodeName)
			}
		}
	}
	if ready == 0 {
		t.Fatalf("Service %s/%s has no ready endpoints", ns, framework.WebhookName)
	}
	for _, p := range webhookPods(t) {
		for _, c := range p.Spec.Containers {
			if c.ImagePullPolicy != corev1.PullNever {
				t.Errorf("pod %s container %s: imagePullPolicy %s, want Never (config/overlays/node)", p.Name, c.Name, c.ImagePullPolicy)
			}
		}
	}
	if res := admitOnce(ctx, m); res != "" {
		t.Fatalf("the in-cluster webhook did not deny a policy for a missing owner: %s", res)
	}
	t.Logf("%d ready endpoints on %s; the apiserver called the webhook through the Service and obeyed its denial", ready, node.NodeName)
}

func TestRollingRestartUnderLoadFailsNoAdmission(t *testing.T) {
	ctx := context.Background()
	webhookMarker(t)
	before := map[string]bool{}
	for _, p := range webhookPods(t) {
		before[p.Name] = true
	}
	l := startLoad(t, 4)
	l.waitTotal(t, 20)
	start := time.Now()
	// What `kubectl rollout restart` does.
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
	if _, err := kube().Kube.AppsV1().Deployments(ns).Patch(ctx, framework.WebhookName, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: framework.FieldManager}); err != nil {
		t.Fatal(err)
	}
	if err := node.WaitDeploymentAvailable(ctx, env, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	waitPodsGone(t, before)
	t.Logf("rollout done and old pods gone in %s", time.Since(start).Round(100*time.Millisecond))
	l.waitTotal(t, 20)
	l.report(t, "rolling restart")
}

func waitPodsGone(t *testing.T, names map[string]bool) {
	t.Helper()
	if err := framework.Eventually(context.Background(), 3*time.Minute, 250*time.Millisecond, "old webhook pods gone", func(context.Context) (bool, string, error) {
		var left []string
		for _, p := range webhookPods(t) {
			if names[p.Name] {
				left = append(left, p.Name)
			}
		}
		return len(left) == 0, fmt.Sprintf("still there: %v", left), nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestEvictingOneReplicaKeepsAdmissionsFlowing(t *testing.T) {
	ctx := context.Background()
	webhookMarker(t)
	d := deployment(t)
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Fatalf("the shipped Deployment runs %v replicas; losing one must not stop admissions, so it needs at least 2", d.Spec.Replicas)
	}
	pdbs, err := kube().Kube.PolicyV1().PodDisruptionBudgets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pdbs.Items) == 0 {
		t.Fatalf("no PodDisruptionBudget in %s: config/default must ship one", ns)
	}
	pdb := pdbs.Items[0].Name
	// Both replicas healthy, as the disruption controller counts them.
	if err := framework.Eventually(ctx, 2*time.Minute, 250*time.Millisecond, "PDB allows one disruption", func(ctx context.Context) (bool, string, error) {
		p, err := kube().Kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, pdb, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		return p.Status.DisruptionsAllowed >= 1 && p.Status.CurrentHealthy == *d.Spec.Replicas,
			fmt.Sprintf("allowed %d healthy %d", p.Status.DisruptionsAllowed, p.Status.CurrentHealthy), nil
	}); err != nil {
		t.Fatal(err)
	}
	pods := webhookPods(t)
	if len(pods) < 2 {
		t.Fatalf("%d webhook pods, want at least 2", len(pods))
	}
	l := startLoad(t, 4)
	l.waitTotal(t, 20)
	evict := func(name string) error {
		return kube().Kube.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}})
	}
	if err := evict(pods[0].Name); err != nil {
		t.Fatalf("evicting %s with the PDB allowing one disruption: %v", pods[0].Name, err)
	}
	// The budget is spent: a second voluntary disruption must be refused
	// until the replacement is healthy.
	if err := evict(pods[1].Name); !apierrors.IsTooManyRequests(err) {
		t.Errorf("evicting the second replica %s right after the first: got %v, want 429 from PDB %s", pods[1].Name, err, pdb)
	}
	waitPodsGone(t, map[string]bool{pods[0].Name: true})
	if err := node.WaitDeploymentAvailable(ctx, env, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	l.waitTotal(t, 20)
	l.report(t, "one replica evicted")
}

func TestCertControllerRotatesTheServingCertificateEndToEnd(t *testing.T) {
	ctx := context.Background()
	m := webhookMarker(t)
	secretName := certSecret(t)
	secrets := kube().Kube.CoreV1().Secrets(ns)
	old, err := secrets.Get(ctx, secretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	oldCA := old.Data["ca.crt"]
	if len(oldCA) == 0 {
		t.Fatalf("Secret %s/%s has no ca.crt: cert-controller has not filled it", ns, secretName)
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
	// After rotation every call must succeed again with the new chain.
	if err := framework.Eventually(ctx, time.Minute, 250*time.Millisecond, "webhook answers with the new certificate", func(ctx context.Context) (bool, string, error) {
		res := admitOnce(ctx, m)
		return res == "", res, nil
	}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if res := admitOnce(ctx, m); res != "" {
			t.Fatalf("admission %d after rotation failed: %s", i, res)
		}
	}
	t.Logf("rotation observed end to end in %s: new CA in the Secret, in every webhook's caBundle, and served by every pod", time.Since(start).Round(100*time.Millisecond))
}

// certSecret is the Secret the webhook pods mount their serving certificate
// from (cert-controller writes it).
func certSecret(t *testing.T) string {
	t.Helper()
	for _, v := range deployment(t).Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			return v.Secret.SecretName
		}
	}
	t.Fatal("the webhook Deployment mounts no Secret volume: where does cert-controller put the certificate?")
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
		vwc, err := kube().Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, framework.WebhookConfigName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		for _, w := range vwc.Webhooks {
			if !bytes.Equal(bytes.TrimSpace(w.ClientConfig.CABundle), bytes.TrimSpace(ca)) {
				return false, "caBundle of " + w.Name + " is not the Secret's CA", nil
			}
		}
		for _, p := range webhookPods(t) {
			if p.Status.PodIP == "" || p.DeletionTimestamp != nil {
				continue
			}
			if why := servesChainTo(p.Status.PodIP, port, pool); why != "" {
				return false, "pod " + p.Name + ": " + why, nil
			}
		}
		return true, "", nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// servesChainTo dials the pod directly (pod addresses are reachable from the
// node) and verifies its serving certificate against pool for the Service's
// DNS name, as the apiserver does.
func servesChainTo(ip string, port int, pool *x509.CertPool) string {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", net.JoinHostPort(ip, strconv.Itoa(port)),
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
		DNSName: framework.WebhookName + "." + ns + ".svc",
	})
	if err != nil {
		return fmt.Sprintf("serves %s (serial %s): %v", certs[0].Subject.CommonName, certs[0].SerialNumber, err)
	}
	return ""
}

// servingPort is the container port the Service sends webhook calls to.
func servingPort(t *testing.T) int {
	t.Helper()
	svc, err := kube().Kube.CoreV1().Services(ns).Get(context.Background(), framework.WebhookName, metav1.GetOptions{})
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
	for _, c := range deployment(t).Spec.Template.Spec.Containers {
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
