package framework

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MetricsEndpoint is one webhook replica's metrics endpoint: HTTPS, with
// the serving certificate the CA signed, to authorized tokens only.
type MetricsEndpoint struct {
	// Replica names the replica (the process, or the pod).
	Replica string
	URL     string
	CA      []byte
	// ServerName is the name the certificate is verified for; empty: the
	// URL's host. A port-forward reaches a pod on 127.0.0.1, and the pod
	// serves the certificate issued for its Service's name, as Prometheus
	// verifies it (the ServiceMonitor's tlsConfig.serverName).
	ServerName string
}

// WebhookMetrics reaches the metrics endpoint of every webhook replica: the
// decisions are spread over the replicas, so a count of known traffic is the
// sum of theirs.
type WebhookMetrics interface {
	// Open returns one endpoint per replica serving now and a function that
	// closes what was opened to reach them (port-forwards); call it when
	// done scraping.
	Open(ctx context.Context) ([]MetricsEndpoint, func(), error)
}

// FixedMetrics is WebhookMetrics for endpoints that need nothing opened (the
// local provider's webhook process).
type FixedMetrics []MetricsEndpoint

// Open implements WebhookMetrics.
func (f FixedMetrics) Open(context.Context) ([]MetricsEndpoint, func(), error) {
	return f, func() {}, nil
}

// MetricsScraper is the ServiceAccount the suite scrapes the webhook's
// metrics as, bound to the shipped ClusterRole sandbox-fence-metrics-reader
// exactly as an admin binds Prometheus.
const MetricsScraper = "sandbox-fence-metrics-scraper"

// MetricsReaderRole is the shipped ClusterRole granting GET /metrics.
const MetricsReaderRole = "sandbox-fence-metrics-reader"

// ScraperToken returns a token of a ServiceAccount in the webhook's
// namespace; bound=true binds it to MetricsReaderRole (idempotent).
func (e *Env) ScraperToken(ctx context.Context, name string, bound bool) (string, error) {
	kc := e.Admin.Kube
	_, err := kc.CoreV1().ServiceAccounts(WebhookNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	if bound {
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: MetricsReaderRole},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: WebhookNamespace}},
		}
		if _, err := kc.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", err
		}
		// RBAC reaches the authorizer's cache asynchronously.
		sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User:                  "system:serviceaccount:" + WebhookNamespace + ":" + name,
			NonResourceAttributes: &authzv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
		}}
		err := Eventually(ctx, 30*time.Second, 100*time.Millisecond, name+" may GET /metrics", func(ctx context.Context) (bool, string, error) {
			r, err := kc.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
			if err != nil {
				return false, "", err
			}
			return r.Status.Allowed, r.Status.Reason, nil
		})
		if err != nil {
			return "", err
		}
	}
	tr, err := kc.CoreV1().ServiceAccounts(WebhookNamespace).CreateToken(ctx, name,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return tr.Status.Token, nil
}

// Scrape GETs the webhook's /metrics with token (none when ""), verifying
// the server against the CA, and returns the status code and body.
func (m MetricsEndpoint) Scrape(ctx context.Context, token string) (int, string, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(m.CA) {
		return 0, "", fmt.Errorf("metrics CA of %s: no PEM certificate", m.Replica)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: m.ServerName, MinVersion: tls.VersionTLS12}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.URL, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// WaitServing waits until the endpoint answers at all: the webhook reports
// ready once its admission listener serves, and the metrics listener may
// start a moment later (after a restart, say).
func (m MetricsEndpoint) WaitServing(ctx context.Context) error {
	return Eventually(ctx, 30*time.Second, 100*time.Millisecond, "the metrics endpoint of webhook "+m.Replica+" answers", func(ctx context.Context) (bool, string, error) {
		_, _, err := m.Scrape(ctx, "")
		return err == nil, fmt.Sprint(err), nil
	})
}

// MetricSum sums the samples of name in a Prometheus text exposition whose
// label set contains every one of labels (`k="v"`).
func MetricSum(body, name string, labels ...string) float64 {
	var sum float64
	for _, l := range strings.Split(body, "\n") {
		if !strings.HasPrefix(l, name+"{") && !strings.HasPrefix(l, name+" ") {
			continue
		}
		match := true
		for _, want := range labels {
			match = match && strings.Contains(l, want)
		}
		if !match {
			continue
		}
		var v float64
		if _, err := fmt.Sscanf(l[strings.LastIndexByte(l, ' ')+1:], "%g", &v); err == nil {
			sum += v
		}
	}
	return sum
}

// MetricNames lists the metric families of an exposition (from its # TYPE
// lines).
func MetricNames(body string) map[string]bool {
	out := map[string]bool{}
	for _, l := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(l, "# TYPE "); ok {
			out[strings.Fields(rest)[0]] = true
		}
	}
	return out
}

// APIServerMetrics scrapes the API server's /metrics as the admin.
func (e *Env) APIServerMetrics(ctx context.Context) (string, error) {
	raw, err := e.Admin.Kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	return string(raw), err
}
