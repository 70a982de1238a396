//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	tst "github.com/sandbox-fence/sandbox-fence/internal/testing"
	"github.com/sandbox-fence/sandbox-fence/internal/webhook"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// TestWebhookMetricsCountKnownTraffic sends a known number of admitted and
// refused per-sandbox policies, scrapes every webhook replica's metrics the
// way the shipped ServiceMonitor does (HTTPS verified against the serving
// CA, a ServiceAccount token bound to sandbox-fence-metrics-reader) and
// requires exactly those counts, by rule, verdict and namespace, summed
// over the replicas (the Service spreads the reviews over them); every
// replica must report the deny mode, and refuse the scrape without a token
// (401) and with a token not bound to the reader role (403). The API
// server's policy metrics are scraped after a known denial too, and every
// metric the dashboard and the alerts name must be exported by one of the
// two.
func TestWebhookMetricsCountKnownTraffic(t *testing.T) {
	requireShipped(t)
	if env.WebhookMetrics == nil {
		t.Skip("the webhook's metrics endpoint is not reachable from the suite on this provider (the local and kind providers' are)")
	}
	ctx := testContext(t)
	replicas, closeMetrics, err := env.WebhookMetrics.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeMetrics)
	if len(replicas) == 0 {
		t.Fatal("no webhook replica's metrics endpoint to scrape")
	}
	stranger, err := env.ScraperToken(ctx, "sandbox-fence-metrics-stranger", false)
	if err != nil {
		t.Fatal(err)
	}
	token, err := env.ScraperToken(ctx, framework.MetricsScraper, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range replicas {
		if err := m.WaitServing(ctx); err != nil {
			t.Fatal(err)
		}
		if code, _, err := m.Scrape(ctx, ""); err != nil || code != 401 {
			t.Errorf("replica %s: scrape without a token: %d %v, want 401", m.Replica, code, err)
		}
		if code, _, err := m.Scrape(ctx, stranger); err != nil || code != 403 {
			t.Errorf("replica %s: scrape with a token not bound to %s: %d %v, want 403", m.Replica, framework.MetricsReaderRole, code, err)
		}
	}
	// scrape returns every replica's exposition.
	scrape := func() []string {
		t.Helper()
		var bodies []string
		for _, m := range replicas {
			code, body, err := m.Scrape(ctx, token)
			if err != nil || code != 200 {
				t.Fatalf("replica %s: scrape as %s: %d %v", m.Replica, framework.MetricsScraper, code, err)
			}
			bodies = append(bodies, body)
		}
		return bodies
	}
	ns := `namespace="` + env.HostNamespace + `"`
	// sum adds a metric's matching series over every replica's exposition.
	sum := func(bodies []string, metric string, labels ...string) float64 {
		var total float64
		for _, body := range bodies {
			total += framework.MetricSum(body, metric, labels...)
		}
		return total
	}
	count := func(bodies []string, verdict string) float64 {
		return sum(bodies, webhook.DecisionsMetric, `rule="`+webhook.RuleCiliumOwner+`"`, `verdict="`+verdict+`"`, ns)
	}

	before := scrape()
	const refused, admitted = 3, 2
	for range refused {
		p, err := env.PerSandboxPolicy("SandboxClaim", name("ghost"), string(uuid.NewUUID()), []string{"example.com"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = env.Host.Dynamic.Resource(framework.CNPGVR).Namespace(env.HostNamespace).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		framework.ExpectDenied(t, "a policy for a missing owner", err, webhookSuffix)
	}
	for range admitted {
		p := perSandboxPolicy(t, env.HostNamespace, "SandboxClaim", hostClaim(t))
		_, err := env.Host.Dynamic.Resource(framework.CNPGVR).Namespace(env.HostNamespace).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		framework.ExpectAdmitted(t, "the host's own policy", err)
	}
	after := scrape()
	for verdict, want := range map[string]float64{webhook.VerdictDenied: refused, webhook.VerdictAllowed: admitted, webhook.VerdictError: 0} {
		if got := count(after, verdict) - count(before, verdict); got != want {
			t.Errorf("%s{rule=%s,verdict=%s,%s} summed over %d replicas grew by %v, want %v", webhook.DecisionsMetric, webhook.RuleCiliumOwner, verdict, ns, len(replicas), got, want)
		}
	}
	for i, body := range after {
		if got := framework.MetricSum(body, webhook.EnforcementMetric, `mode="deny"`); got != 1 {
			t.Errorf(`replica %s: %s{mode="deny"} = %v, want 1`, replicas[i].Replica, webhook.EnforcementMetric, got)
		}
	}

	// Owners are read from the cache (--owner-cache-first, the default): no
	// read above found the owner watches stale (webhook.WatchHealth), and a
	// write for a claim the informers have seen reads nothing live.
	lookups := func(bodies []string, labels ...string) float64 {
		return sum(bodies, webhook.LookupSecondsMetric+"_count", labels...)
	}
	if got := lookups(after, `result="stale"`) - lookups(before, `result="stale"`); got != 0 {
		t.Errorf(`%s_count{result="stale"} grew by %v while the webhook ran: its owner watches were not current`, webhook.LookupSecondsMetric, got)
	}
	cached := perSandboxPolicy(t, env.HostNamespace, "SandboxClaim", hostClaim(t))
	err = framework.Eventually(ctx, 30*time.Second, 100*time.Millisecond, "a write whose owner the cache answers alone", func(ctx context.Context) (bool, string, error) {
		live := lookups(scrape(), `source="live"`)
		if _, err := env.Host.Dynamic.Resource(framework.CNPGVR).Namespace(env.HostNamespace).Create(ctx, cached, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			return false, "", err
		}
		live = lookups(scrape(), `source="live"`) - live
		return live == 0, fmt.Sprintf("live owner reads of the write: %v", live), nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// One known policy denial, counted by the API server.
	apiBefore, err := env.APIServerMetrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sbx := sandboxWithEpoch(t, "4")
	framework.ExpectDenied(t, "lowering the epoch", patch(t, env.Host, framework.SandboxGVR, env.HostNamespace, sbx.GetName(), types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+fence.AnnotationHolderEpoch+`":"3"}}}`)), framework.PolicyHolderEpoch)
	apiAfter, err := env.APIServerMetrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	vap := func(body string) float64 {
		return framework.MetricSum(body, "apiserver_validating_admission_policy_check_total", `policy="`+framework.PolicyHolderEpoch+`"`, `enforcement_action="deny"`)
	}
	if got := vap(apiAfter) - vap(apiBefore); got != 1 {
		t.Errorf("apiserver_validating_admission_policy_check_total{policy=%s,enforcement_action=deny} grew by %v, want 1", framework.PolicyHolderEpoch, got)
	}

	// Every metric the dashboard and the alerts read exists.
	exported := framework.MetricNames(apiAfter)
	for _, body := range after {
		for n := range framework.MetricNames(body) {
			exported[n] = true
		}
	}
	root := repoRoot(t)
	monitored, err := tst.MonitoredMetrics(root)
	if err != nil {
		t.Fatal(err)
	}
	for metric, where := range monitored {
		switch metric {
		case "up": // made by Prometheus itself
			continue
		case "apiserver_admission_webhook_fail_open_count": // only once a webhook failed open
			continue
		}
		if !exported[metric] {
			t.Errorf("%s (used by %s) is exported neither by the webhook nor by the API server", metric, strings.Join(where, ", "))
		}
	}
}
