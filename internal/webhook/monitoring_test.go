package webhook_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	tst "github.com/sandbox-fence/sandbox-fence/internal/testing"
	"github.com/sandbox-fence/sandbox-fence/internal/vapeval"
	"github.com/sandbox-fence/sandbox-fence/internal/webhook"
)

const monitoringDir = "../../config/components/monitoring"

func renderMonitoring(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	objs := tst.Render(t, "../../config", "default", "components/monitoring")
	// As the API server would see them: JSON numbers, not Go ints.
	for _, o := range objs {
		b, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		o.Object = nil
		if err := json.Unmarshal(b, &o.Object); err != nil {
			t.Fatal(err)
		}
	}
	return objs
}

// TestMonitoringComponentValidatesAgainstPrometheusOperatorCRDs renders
// config/default with the monitoring component and validates its
// ServiceMonitor and PrometheusRule against the CRD schemas of the
// prometheus-operator module (the OpenAPI schema and CEL rules, as the API
// server would on create), and checks the ServiceMonitor selects the metrics
// Service, whose port reaches the Deployment's metrics port.
func TestMonitoringComponentValidatesAgainstPrometheusOperatorCRDs(t *testing.T) {
	dir := tst.ModuleDir(t, "github.com/prometheus-operator/prometheus-operator", tst.PrometheusOperatorVersion)
	objs := renderMonitoring(t)
	var kinds []string
	for _, o := range objs {
		var crdFile string
		switch o.GetKind() {
		case "ServiceMonitor":
			crdFile = "monitoring.coreos.com_servicemonitors.yaml"
		case "PrometheusRule":
			crdFile = "monitoring.coreos.com_prometheusrules.yaml"
		default:
			continue
		}
		kinds = append(kinds, o.GetKind())
		crd, err := vapeval.LoadCRD(filepath.Join(dir, "example", "prometheus-operator-crd", crdFile))
		if err != nil {
			t.Fatal(err)
		}
		errs, err := vapeval.ValidateObject(crd, o.Object)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range errs {
			t.Errorf("%s %s: %v", o.GetKind(), o.GetName(), e)
		}
	}
	sort.Strings(kinds)
	if d := cmp.Diff([]string{"PrometheusRule", "ServiceMonitor"}, kinds); d != "" {
		t.Fatalf("the component renders (-want +got):\n%s", d)
	}

	// The ServiceMonitor selects the metrics Service by its labels and port
	// name; the Service's targetPort is the Deployment's metrics port.
	find := func(kind, name string) *unstructured.Unstructured {
		for _, o := range objs {
			if o.GetKind() == kind && o.GetName() == name {
				return o
			}
		}
		t.Fatalf("no %s %s rendered", kind, name)
		return nil
	}
	sm := find("ServiceMonitor", "sandbox-fence-webhook")
	svc := find("Service", "sandbox-fence-webhook-metrics")
	sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	for k, v := range sel {
		if svc.GetLabels()[k] != v {
			t.Errorf("ServiceMonitor selects %s=%s, the metrics Service has %v", k, v, svc.GetLabels())
		}
	}
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if len(eps) != 1 || len(ports) != 1 || eps[0].(map[string]any)["port"] != ports[0].(map[string]any)["name"] {
		t.Errorf("ServiceMonitor endpoints %v do not name the metrics Service's port %v", eps, ports)
	}
	dep := find("Deployment", "sandbox-fence-webhook")
	cports, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	found := false
	for _, p := range cports[0].(map[string]any)["ports"].([]any) {
		pm := p.(map[string]any)
		found = found || pm["name"] == ports[0].(map[string]any)["targetPort"]
	}
	if !found {
		t.Errorf("the metrics Service's targetPort %v is no port of the Deployment", ports[0].(map[string]any)["targetPort"])
	}
	// The dashboard ConfigMap carries the JSON file as is.
	cm := find("ConfigMap", "sandbox-fence-dashboard")
	raw, err := os.ReadFile(filepath.Join(monitoringDir, "dashboards", "sandbox-fence.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedString(cm.Object, "data", "sandbox-fence.json"); got != string(raw) {
		t.Errorf("the dashboard ConfigMap does not carry dashboards/sandbox-fence.json")
	}
}

// TestDashboardAndAlertsNameExportedMetrics holds every sandbox_fence_*
// name the dashboard and the alerts use to the metrics this package
// registers, and every alert to a runbook in docs/webhook.md. (The e2e
// metrics case checks the API server's names against a real scrape.)
func TestDashboardAndAlertsNameExportedMetrics(t *testing.T) {
	own := map[string]bool{webhook.DecisionsMetric: true, webhook.LookupSecondsMetric: true, webhook.EnforcementMetric: true, webhook.BuildInfoMetric: true}
	refs, err := tst.MonitoredMetrics("../..")
	if err != nil {
		t.Fatal(err)
	}
	for m, where := range refs {
		if strings.HasPrefix(m, "sandbox_fence_") && !own[m] {
			t.Errorf("%s (in %s) is not a metric of the webhook", m, strings.Join(where, ", "))
		}
	}
	for _, m := range []string{webhook.DecisionsMetric, "apiserver_validating_admission_policy_check_total"} {
		if refs[m] == nil {
			t.Errorf("neither the dashboard nor the alerts use %s", m)
		}
	}
	alerts, err := tst.Alerts("../..")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/webhook.md")
	if err != nil {
		t.Fatal(err)
	}
	const base = "https://github.com/sandbox-fence/sandbox-fence/blob/main/docs/webhook.md#"
	for _, a := range alerts {
		// GitHub's anchor of a heading that is the alert's name alone.
		if want := base + strings.ToLower(a.Name); a.Annotations["runbook_url"] != want || !strings.Contains(string(doc), "\n### "+a.Name+"\n") {
			t.Errorf("alert %s: runbook_url %q, want %q, the anchor of its heading \"### %s\" in docs/webhook.md", a.Name, a.Annotations["runbook_url"], want, a.Name)
		}
	}
}

// The build_info gauge is exported from the start, before any request.
func TestBuildInfoIsExported(t *testing.T) {
	reg := prometheus.NewRegistry()
	webhook.NewMetrics(reg)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != webhook.BuildInfoMetric {
			continue
		}
		labels := map[string]string{}
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if f.GetMetric()[0].GetGauge().GetValue() != 1 || labels["goversion"] != runtime.Version() || labels["version"] == "" {
			t.Errorf("%s = %v %v, want 1 with goversion %s and a version", webhook.BuildInfoMetric, f.GetMetric()[0].GetGauge().GetValue(), labels, runtime.Version())
		}
		return
	}
	t.Errorf("%s is not exported", webhook.BuildInfoMetric)
}

// TestAlertsPassPromtoolsRuleTests holds the alerts to Prometheus' own
// tools (promtool, built from the Prometheus module into bin/ by make
// tools): check rules parses the rendered PrometheusRule's groups with
// their templates, and test rules runs config/components/monitoring/
// prometheusrule_test.yaml, in which every alert fires on the series that
// should raise it and none on a healthy webhook. Annotations other than
// runbook_url are left out of the tested rules, so the cases need not
// repeat their prose.
func TestAlertsPassPromtoolsRuleTests(t *testing.T) {
	promtool, err := tst.Tool("promtool", "Prometheus' promtool: run make tools (it builds it from the Go module proxy)")
	if err != nil {
		t.Fatal(err)
	}
	var spec map[string]any
	for _, o := range renderMonitoring(t) {
		if o.GetKind() == "PrometheusRule" {
			spec, _, _ = unstructured.NestedMap(o.Object, "spec")
		}
	}
	if spec == nil {
		t.Fatal("the monitoring component renders no PrometheusRule")
	}
	dir := t.TempDir()
	write := func(name string, v any) string {
		b, err := yaml.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	run := func(args ...string) {
		if out, err := exec.CommandContext(t.Context(), promtool, args...).CombinedOutput(); err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("check", "rules", write("full.yaml", spec))
	for _, g := range spec["groups"].([]any) {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			a := r.(map[string]any)["annotations"].(map[string]any)
			for k := range a {
				if k != "runbook_url" {
					delete(a, k)
				}
			}
		}
	}
	write("rules.yaml", spec)
	cases, err := os.ReadFile(filepath.Join(monitoringDir, "prometheusrule_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheusrule_test.yaml"), cases, 0o644); err != nil {
		t.Fatal(err)
	}
	run("test", "rules", filepath.Join(dir, "prometheusrule_test.yaml"))
}
