package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/client-go/kubernetes"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

// The apiserver's own histograms for our enforcers (every admission
// decision of the fence is timed by the server that makes it).
const (
	vapMetric     = "apiserver_validating_admission_policy_check_duration_seconds"
	webhookMetric = "apiserver_admission_webhook_admission_duration_seconds"
	// pluginMetric times each admission plugin per request, admitted or
	// not: the only server-side figure for admitted VAP checks, since the
	// apiserver observes vapMetric for a binding only on a denial or an
	// evaluation error (k8s.io/apiserver validating/dispatcher.go).
	pluginMetric = "apiserver_admission_controller_admission_duration_seconds"
	// lookupMetric is our webhook's own: each owner read, by source (cache,
	// live) and result, scraped from the webhook around every cell. It is
	// internal/webhook.LookupSecondsMetric, written out: importing that
	// package would compile controller-runtime's webhook dependencies into
	// this module at other versions than the root's
	// (TestNestedModulesCompileTheRootsVersions).
	lookupMetric = "sandbox_fence_webhook_owner_lookup_duration_seconds"
)

// apiserverFamilies are the apiserver's histograms metricsTable prints.
var apiserverFamilies = []string{vapMetric, webhookMetric, pluginMetric}

// families are the histograms kept from a scrape, the apiserver's or our
// webhook's.
var families = append(slices.Clone(apiserverFamilies), lookupMetric)

// histogram is one Prometheus histogram series aggregated over the labels
// we do not group by.
type histogram struct {
	buckets map[float64]float64 // upper bound -> cumulative count
	sum     float64
	count   float64
}

// scrape is the parsed /metrics of the apiserver: family -> group key ->
// histogram.
type scrape map[string]map[string]*histogram

// scrapeMetrics reads the apiserver's /metrics as the admin.
func scrapeMetrics(ctx context.Context, kc kubernetes.Interface) (scrape, error) {
	raw, err := kc.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("scrape /metrics: %w", err)
	}
	return parseMetrics(raw), nil
}

// groupKey picks the labels a family is reported by.
func groupKey(family string, labels map[string]string) string {
	switch family {
	case vapMetric:
		return labels["policy"] + " " + labels["enforcement_action"] + " " + labels["error_type"]
	case webhookMetric:
		return labels["name"] + " " + labels["operation"] + " rejected=" + labels["rejected"]
	case lookupMetric:
		return labels["kind"] + " " + labels["source"] + " " + labels["result"]
	case pluginMetric:
		if n := labels["name"]; n == "ValidatingAdmissionPolicy" || n == "ValidatingAdmissionWebhook" {
			return n + " " + labels["operation"] + " rejected=" + labels["rejected"]
		}
	}
	return ""
}

// parseMetrics reads the Prometheus text format, keeping families.
// It is a small reader on purpose: only histogram lines of two known
// families are needed.
func parseMetrics(raw []byte) scrape {
	out := scrape{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		var family, suffix string
		for _, f := range families {
			if rest, ok := strings.CutPrefix(line, f+"_"); ok {
				rest = "_" + rest
				family = f
				suffix, _, _ = strings.Cut(rest, "{")
				break
			}
		}
		if family == "" {
			continue
		}
		open, close := strings.IndexByte(line, '{'), strings.LastIndexByte(line, '}')
		if open < 0 || close < open {
			continue
		}
		labels := parseLabels(line[open+1 : close])
		v, err := strconv.ParseFloat(strings.TrimSpace(line[close+1:]), 64)
		if err != nil {
			continue
		}
		key := groupKey(family, labels)
		if key == "" {
			continue
		}
		if out[family] == nil {
			out[family] = map[string]*histogram{}
		}
		h := out[family][key]
		if h == nil {
			h = &histogram{buckets: map[float64]float64{}}
			out[family][key] = h
		}
		switch suffix {
		case "_bucket":
			le, err := strconv.ParseFloat(labels["le"], 64)
			if err == nil {
				h.buckets[le] += v
			}
		case "_sum":
			h.sum += v
		case "_count":
			h.count += v
		}
	}
	return out
}

func parseLabels(s string) map[string]string {
	m := map[string]string{}
	for s != "" {
		k, rest, ok := strings.Cut(s, "=\"")
		if !ok {
			break
		}
		end := strings.IndexByte(rest, '"')
		for end > 0 && rest[end-1] == '\\' {
			next := strings.IndexByte(rest[end+1:], '"')
			if next < 0 {
				break
			}
			end += next + 1
		}
		if end < 0 {
			break
		}
		m[strings.TrimPrefix(k, ",")] = rest[:end]
		s = strings.TrimPrefix(rest[end+1:], ",")
	}
	return m
}

// diff is after minus before: the requests of the measured phase only.
func (after scrape) diff(before scrape) scrape {
	out := scrape{}
	for fam, groups := range after {
		out[fam] = map[string]*histogram{}
		for key, h := range groups {
			d := &histogram{buckets: map[float64]float64{}, sum: h.sum, count: h.count}
			for le, c := range h.buckets {
				d.buckets[le] = c
			}
			if b := before[fam][key]; b != nil {
				d.sum -= b.sum
				d.count -= b.count
				for le, c := range b.buckets {
					d.buckets[le] -= c
				}
			}
			if d.count > 0 {
				out[fam][key] = d
			}
		}
	}
	return out
}

// add accumulates d into s.
func (s scrape) add(d scrape) {
	for fam, groups := range d {
		if s[fam] == nil {
			s[fam] = map[string]*histogram{}
		}
		for key, h := range groups {
			acc := s[fam][key]
			if acc == nil {
				acc = &histogram{buckets: map[float64]float64{}}
				s[fam][key] = acc
			}
			acc.sum += h.sum
			acc.count += h.count
			for le, c := range h.buckets {
				acc.buckets[le] += c
			}
		}
	}
}

// metricsTable renders the histograms of each configuration's measured
// blocks (scraped right before and after each block, so the probes of the
// switches are not in them) as Markdown. The buckets are coarse (the
// policy histogram's are 0.5 µs, 1 ms, 10 ms, ...), so the cumulative
// bucket counts are printed rather than interpolated quantiles that would
// only restate the bucket bounds.
func metricsTable(perConfig map[string]scrape, order []string) string {
	var b strings.Builder
	for _, fam := range apiserverFamilies {
		fmt.Fprintf(&b, "`%s`:\n\n", fam)
		b.WriteString("| config | series | count | mean (ms) | cumulative buckets (le seconds: count) |\n|---|---|---:|---:|---|\n")
		for _, c := range order {
			if histogramRows(&b, c, perConfig[c][fam]) == 0 {
				fmt.Fprintf(&b, "| %s | (no samples) | 0 | | |\n", c)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// histogramRows writes a Markdown row per series of groups that has
// samples, in name order, after the cells of prefix: its key, count, mean
// and cumulative buckets. It returns how many it wrote.
func histogramRows(b *strings.Builder, prefix string, groups map[string]*histogram) int {
	keys := make([]string, 0, len(groups))
	for k, h := range groups {
		if h.count > 0 {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		h := groups[k]
		fmt.Fprintf(b, "| %s | %s | %.0f | %.3f | %s |\n", prefix, k, h.count, 1000*h.sum/h.count, h.bucketString())
	}
	return len(keys)
}

// bucketString lists the cumulative counts up to the first bucket holding
// every sample.
func (h *histogram) bucketString() string {
	les := make([]float64, 0, len(h.buckets))
	for le := range h.buckets {
		les = append(les, le)
	}
	slices.Sort(les)
	var parts []string
	for _, le := range les {
		c := h.buckets[le]
		if c == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%g: %.0f", le, c))
		if c >= h.count {
			break
		}
	}
	return strings.Join(parts, ", ")
}

// webhookScraper reads our webhook's /metrics (every replica, summed) as
// the ServiceAccount the suite binds to the shipped metrics-reader role.
type webhookScraper struct {
	env   *framework.Env
	token string
}

func (w *webhookScraper) scrape(ctx context.Context) (scrape, error) {
	eps, done, err := w.env.WebhookMetrics.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	out := scrape{}
	for _, ep := range eps {
		code, body, err := ep.Scrape(ctx, w.token)
		if err != nil || code != 200 {
			return nil, fmt.Errorf("scrape the webhook's /metrics (%s): HTTP %d, %v", ep.Replica, code, err)
		}
		out.add(parseMetrics([]byte(body)))
	}
	return out, nil
}

// ownerReadTable is the webhook's owner reads per cell of the configurations
// that run it, summed over the measured rounds.
func ownerReadTable(wls []workload, conc []int, configs []config, results map[string][]*cellResult, key func(string, string, int) string) string {
	var b strings.Builder
	b.WriteString("The webhook's owner reads per cell (`" + lookupMetric + "`, scraped from the webhook around each cell, summed over the rounds):\n\n")
	b.WriteString("| config | workload | clients | kind source result | reads | mean (ms) | cumulative buckets (le seconds: count) |\n|---|---|---:|---|---:|---:|---|\n")
	for _, c := range configs {
		if !c.Webhook {
			continue
		}
		for _, w := range wls {
			for _, n := range conc {
				sum := scrape{}
				for _, cell := range results[key(c.Name, w.Name, n)] {
					sum.add(cell.owner)
				}
				histogramRows(&b, c.Name+" | "+w.Name+" | "+clientsLabel(n), sum[lookupMetric])
			}
		}
	}
	return b.String() + "\n"
}
