//go:build soak

package soak

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fence/sandbox-fence/e2e/cluster"
	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

// component returns the newest process of that name the control plane
// tracks (the live one after a restart).
func component(t *testing.T, name string) *cluster.Process {
	t.Helper()
	p, err := local.Component(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// restart starts a stopped component again with the same command line and
// log file, tracked by the control plane so teardown ends it.
func restart(t *testing.T, old *cluster.Process) *cluster.Process {
	t.Helper()
	p, err := local.Restart(old)
	if err != nil {
		t.Fatalf("restart %s: %v", old.Name, err)
	}
	return p
}

// apiserverReady polls kube-apiserver /readyz as the admin.
func apiserverReady(ctx context.Context, timeout time.Duration) (time.Time, error) {
	var at time.Time
	err := framework.Eventually(ctx, timeout, 50*time.Millisecond, "kube-apiserver /readyz", func(ctx context.Context) (bool, string, error) {
		body, err := env.Admin.Kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return false, err.Error() + " " + string(body), nil
		}
		at = time.Now()
		return true, "", nil
	})
	return at, err
}

// webhookURL is the base URL of the running webhook's TLS listener.
func webhookURL(p *cluster.Process) string {
	return "https://127.0.0.1:" + p.Flag("port")
}

// caBundle returns the CA the API server trusts for the webhook (the
// ValidatingWebhookConfiguration's caBundle), as a pool.
func caBundle(ctx context.Context, t *testing.T) (*x509.CertPool, []byte) {
	t.Helper()
	vwc, err := env.Admin.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, framework.WebhookConfigName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("read the webhook configuration: %v", err)
	}
	pem := vwc.Webhooks[0].ClientConfig.CABundle
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("caBundle of %s holds no certificate", framework.WebhookConfigName)
	}
	return pool, pem
}

// webhookClient is an HTTPS client that trusts what the API server trusts.
func webhookClient(ctx context.Context, t *testing.T, timeout time.Duration) *http.Client {
	pool, _ := caBundle(ctx, t)
	return &http.Client{Timeout: timeout, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}

// servedSerial is the serial number of the certificate the webhook presents
// right now (not verified: a caller compares it with what it wrote).
func servedSerial(p *cluster.Process) (string, error) {
	conn, err := tls.Dial("tcp", strings.TrimPrefix(webhookURL(p), "https://"), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reads the served certificate, trusts nothing
	if err != nil {
		return "", err
	}
	defer conn.Close()
	certs := conn.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return "", fmt.Errorf("no certificate served")
	}
	return certs[0].SerialNumber.String(), nil
}

// peakRSS reads VmHWM (the resident set's high-water mark) of pid, in KiB.
func peakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			var kib int64
			_, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kib)
			return kib, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// metric scrapes the webhook's metrics endpoint (HTTPS, as the shipped
// metrics reader) and sums the samples of name whose label set contains
// every one of labels (`k="v"`). p is the webhook process being measured;
// its metrics address is the one the provider reports.
func metric(t *testing.T, p *cluster.Process, name string, labels ...string) float64 {
	t.Helper()
	if env.WebhookMetrics == nil || !strings.HasSuffix(env.WebhookMetrics.URL, p.Flag("metrics-bind-address")+"/metrics") {
		t.Fatalf("the webhook's metrics endpoint is not known for pid %d", p.Pid)
	}
	scraperOnce.Do(func() {
		scraperToken, scraperErr = env.ScraperToken(context.Background(), framework.MetricsScraper, true)
	})
	if scraperErr != nil {
		t.Fatalf("a token to scrape the webhook's metrics: %v", scraperErr)
	}
	if err := env.WebhookMetrics.WaitServing(context.Background()); err != nil {
		t.Fatal(err)
	}
	code, body, err := env.WebhookMetrics.Scrape(context.Background(), scraperToken)
	if err != nil || code != 200 {
		t.Fatalf("scrape webhook metrics: %d %v", code, err)
	}
	return framework.MetricSum(body, name, labels...)
}

var (
	scraperOnce  sync.Once
	scraperToken string
	scraperErr   error
)

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

var (
	metav1GetOptions   = metav1.GetOptions{}
	metav1PatchOptions = metav1.PatchOptions{}
)
