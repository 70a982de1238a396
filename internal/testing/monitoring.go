package testing

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
	raw, err = os.ReadFile(filepath.Join(dir, "prometheusrule.yaml"))
	if err != nil {
		return nil, err
	}
	rule := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(raw, &rule.Object); err != nil {
		return nil, err
	}
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	for _, g := range groups {
		rules, _ := g.(map[string]any)["rules"].([]any)
		for _, r := range rules {
			rm, _ := r.(map[string]any)
			alert, _ := rm["alert"].(string)
			expr, _ := rm["expr"].(string)
			add("alert "+alert, expr)
		}
	}
	return out, nil
}
