package webhook

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names, documented in docs/webhook.md.
const (
	DecisionsMetric     = "sandbox_fence_webhook_decisions_total"
	LookupSecondsMetric = "sandbox_fence_webhook_owner_lookup_duration_seconds"
)

// RuleCiliumOwner is the rule label of the decisions counter.
const RuleCiliumOwner = "cilium-owner"

// Verdict labels of the decisions counter.
const (
	// VerdictAllowed: the rule ran and admitted.
	VerdictAllowed = "allowed"
	// VerdictDenied: the rule ran and refused.
	VerdictDenied = "denied"
	// VerdictError: refused because something the rule needed (the
	// FenceConfig, an owner lookup) could not be read; fails closed.
	VerdictError = "error"
	// VerdictSkipped: the request is outside the rule (not a bound host,
	// another kind or operation, a delete the policy judges).
	VerdictSkipped = "skipped"
)

// Metrics are the webhook's own Prometheus metrics; controller-runtime adds
// its per-path request metrics (controller_runtime_webhook_*) itself.
type Metrics struct {
	decisions     *prometheus.CounterVec
	lookupSeconds *prometheus.HistogramVec
}

// NewMetrics creates the metrics and registers them with reg
// (controller-runtime's metrics.Registry in the binary).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: DecisionsMetric,
			Help: "Admission decisions of the sandbox-fence webhook by rule and verdict (allowed, denied, error, skipped).",
		}, []string{"rule", "verdict"}),
		lookupSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    LookupSecondsMetric,
			Help:    "Latency of owner lookups by kind, source (cache, live) and result (found, not_found, error).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"kind", "source", "result"}),
	}
	reg.MustRegister(m.decisions, m.lookupSeconds)
	return m
}

func (m *Metrics) decision(rule, verdict string) {
	if m != nil {
		m.decisions.WithLabelValues(rule, verdict).Inc()
	}
}

func (m *Metrics) lookup(kind, source, result string, d time.Duration) {
	if m != nil {
		m.lookupSeconds.WithLabelValues(kind, source, result).Observe(d.Seconds())
	}
}
