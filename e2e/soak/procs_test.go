//go:build soak

package soak

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
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

// verifiedSerial makes a fresh TLS handshake with the webhook, verified
// against pool (the caBundle the API server trusts) as the API server
// verifies it, and returns the serial number of the certificate served.
func verifiedSerial(p *cluster.Process, pool *x509.CertPool) (string, error) {
	conn, err := tls.Dial("tcp", strings.TrimPrefix(webhookURL(p), "https://"), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
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

// freshReview posts an AdmissionReview to the webhook over a new connection
// (no keep-alive), verified against pool, and returns its response.
func freshReview(ctx context.Context, p *cluster.Process, pool *x509.CertPool, path string, review []byte) (*admissionv1.AdmissionResponse, error) {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, webhookURL(p)+path, bytes.NewReader(review))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: tr, Timeout: webhookTimeout}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, body)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &out); err != nil || out.Response == nil {
		return nil, fmt.Errorf("not an AdmissionReview with a response (%v): %.200s", err, body)
	}
	return out.Response, nil
}

// connsTo returns the local ports of pid's established TCP connections to
// 127.0.0.1:port (from /proc/net/tcp, matched to pid's sockets by inode):
// which connections kube-apiserver holds to the webhook right now.
func connsTo(pid int, port string) (map[string]bool, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	table, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return nil, err
	}
	want, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, l := range strings.Split(string(table), "\n")[1:] {
		f := strings.Fields(l)
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		if len(f) < 10 || f[3] != "01" || !inodes[f[9]] {
			continue
		}
		local, remote := strings.Split(f[1], ":"), strings.Split(f[2], ":")
		if len(local) != 2 || len(remote) != 2 {
			continue
		}
		if rp, err := strconv.ParseUint(remote[1], 16, 16); err == nil && rp == want {
			out[local[1]] = true
		}
	}
	return out, nil
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
	if env.WebhookMetrics == nil {
		t.Fatalf("the webhook's metrics endpoint is not known for pid %d", p.Pid)
	}
	eps, closeMetrics, err := env.WebhookMetrics.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer closeMetrics()
	if len(eps) != 1 || !strings.HasSuffix(eps[0].URL, p.Flag("metrics-bind-address")+"/metrics") {
		t.Fatalf("the webhook's metrics endpoint is not known for pid %d (the provider reports %d endpoints)", p.Pid, len(eps))
	}
	m := eps[0]
	scraperOnce.Do(func() {
		scraperToken, scraperErr = env.ScraperToken(context.Background(), framework.MetricsScraper, true)
	})
	if scraperErr != nil {
		t.Fatalf("a token to scrape the webhook's metrics: %v", scraperErr)
	}
	if err := m.WaitServing(context.Background()); err != nil {
		t.Fatal(err)
	}
	code, body, err := m.Scrape(context.Background(), scraperToken)
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
