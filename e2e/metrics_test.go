//go:build e2e

package e2e

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	tst "github.com/sandbox-fence/sandbox-fence/internal/testing"
	"github.com/sandbox-fence/sandbox-fence/internal/webhook"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// TestWebhookMetricsCountKnownTraffic sends a known number of admitted and
// refused per-sandbox policies, scrapes the webhook's metrics the way the
// shipped ServiceMonitor does (HTTPS verified against the serving CA, a
// ServiceAccount token bound to sandbox-fence-metrics-reader) and requires
// exactly those counts, by rule, verdict and namespace; the scrape must be
// refused without a token (401) and with a token not bound to the reader
// role (403). The API server's policy metrics are scraped after a known
// denial too, and every metric the dashboard and the alerts name must be
// exported by one of the two.
func TestWebhookMetricsCountKnownTraffic(t *testing.T) {
	requireShipped(t)
	if env.WebhookMetrics == nil {
		t.Skip("the webhook's metrics endpoint is not reachable from the suite on this provider (the local provider's is)")
	}
	ctx := testContext(t)
	m := *env.WebhookMetrics
	if err := m.WaitServing(ctx); err != nil {
		t.Fatal(err)
	}
	if code, _, err := m.Scrape(ctx, ""); err != nil || code != 401 {
		t.Errorf("scrape without a token: %d %v, want 401", code, err)
	}
	stranger, err := env.ScraperToken(ctx, "sandbox-fence-metrics-stranger", false)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, err := m.Scrape(ctx, stranger); err != nil || code != 403 {
		t.Errorf("scrape with a token not bound to %s: %d %v, want 403", framework.MetricsReaderRole, code, err)
	}
	token, err := env.ScraperToken(ctx, framework.MetricsScraper, true)
	if err != nil {
		t.Fatal(err)
	}
	scrape := func() string {
		t.Helper()
		code, body, err := m.Scrape(ctx, token)
		if err != nil || code != 200 {
			t.Fatalf("scrape as %s: %d %v", framework.MetricsScraper, code, err)
		}
		return body
	}
	ns := `namespace="` + env.HostNamespace + `"`
	count := func(body, verdict string) float64 {
		return framework.MetricSum(body, webhook.DecisionsMetric, `rule="`+webhook.RuleCiliumOwner+`"`, `verdict="`+verdict+`"`, ns)
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
			t.Errorf("%s{rule=%s,verdict=%s,%s} grew by %v, want %v", webhook.DecisionsMetric, webhook.RuleCiliumOwner, verdict, ns, got, want)
		}
	}
	if got := framework.MetricSum(after, webhook.EnforcementMetric, `mode="deny"`); got != 1 {
		t.Errorf(`%s{mode="deny"} = %v, want 1`, webhook.EnforcementMetric, got)
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
	exported := framework.MetricNames(after)
	for n := range framework.MetricNames(apiAfter) {
		exported[n] = true
	}
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
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
