package testing

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// metricName picks the metric names of the families the monitoring
// component reads out of a PromQL expression.
var metricName = regexp.MustCompile(`\b(sandbox_fence_webhook_\w+|controller_runtime_webhook_\w+|apiserver_\w+|up)\b`)

// MonitoredMetrics reads the shipped Grafana dashboard and PrometheusRule
// (config/components/monitoring under repoRoot) and returns every metric
// family they use (a histogram by its family name, without _bucket), each
// with the panels and alerts that use it.
func MonitoredMetrics(repoRoot string) (map[string][]string, error) {
	dir := filepath.Join(repoRoot, "config", "components", "monitoring")
	out := map[string][]string{}
	add := func(where, expr string) {
		for _, m := range metricName.FindAllString(expr, -1) {
			m = strings.TrimSuffix(m, "_bucket")
			if !slices.Contains(out[m], where) {
				out[m] = append(out[m], where)
			}
		}
	}
	raw, err := os.ReadFile(filepath.Join(dir, "dashboards", "sandbox-fence.json"))
	if err != nil {
		return nil, err
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		return nil, err
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			add("panel "+p.Title, tg.Expr)
		}
	}
	alerts, err := Alerts(repoRoot)
	if err != nil {
		return nil, err
	}
	for _, a := range alerts {
		add("alert "+a.Name, a.Expr)
	}
	return out, nil
}

// Alert is one alerting rule of the shipped PrometheusRule.
type Alert struct {
	Name, Expr  string
	Annotations map[string]string
}

// Alerts reads the alerting rules of the shipped PrometheusRule
// (config/components/monitoring/prometheusrule.yaml under repoRoot).
func Alerts(repoRoot string) ([]Alert, error) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, "config", "components", "monitoring", "prometheusrule.yaml"))
	if err != nil {
		return nil, err
	}
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert, Expr string
					Annotations map[string]string
				}
			}
		}
	}
	if err := yaml.Unmarshal(raw, &rule); err != nil {
		return nil, err
	}
	var out []Alert
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			out = append(out, Alert{Name: r.Alert, Expr: r.Expr, Annotations: r.Annotations})
		}
	}
	return out, nil
}
