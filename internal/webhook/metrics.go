package webhook

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"

	"github.com/sandbox-fence/sandbox-fence/internal/buildinfo"
	"github.com/sandbox-fence/sandbox-fence/internal/enforcement"
)

// Metric names, documented in docs/webhook.md.
const (
	DecisionsMetric     = "sandbox_fence_webhook_decisions_total"
	LookupSecondsMetric = "sandbox_fence_webhook_owner_lookup_duration_seconds"
	EnforcementMetric   = "sandbox_fence_webhook_enforcement_mode"
	// BuildInfoMetric is Prometheus' usual build_info gauge (client_golang's
	// version collector): 1, labelled with the release the binary was built
	// from (its module version), the commit and the Go version.
	BuildInfoMetric = "sandbox_fence_build_info"
)

// MaxNamespaceLabels bounds the namespace label of the decisions counter:
// the first MaxNamespaceLabels namespaces seen keep their name, later ones
// count as OtherNamespace. Through the API server only the bound hosts'
// namespaces reach the webhook (its bound-hosts matchCondition), so a
// cluster stays far below
// the bound; the bound is for requests sent to the webhook's port directly,
// which must not be able to grow the scrape without limit.
const MaxNamespaceLabels = 64

// OtherNamespace is the namespace label beyond MaxNamespaceLabels.
const OtherNamespace = "_other"

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
	mode          *prometheus.GaugeVec

	mu         sync.Mutex
	namespaces map[string]bool
}

// NewMetrics creates the metrics and registers them with reg
// (controller-runtime's metrics.Registry in the binary).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: DecisionsMetric,
			Help: "Admission decisions of the sandbox-fence webhook by rule, verdict (allowed, denied, error, skipped; denied counts violations in every enforcement mode) and namespace of the request (at most 64 distinct, then _other).",
		}, []string{"rule", "verdict", "namespace"}),
		lookupSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    LookupSecondsMetric,
			Help:    "Latency of owner lookups by kind, source (cache, live) and result (found, not_found, error; stale: the cache was not current, see docs/webhook.md Caching).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"kind", "source", "result"}),
	}
	m.mode = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: EnforcementMetric,
		Help: "1 for the enforcement mode the webhook runs in (--enforcement: deny, warn or audit), 0 for the others.",
	}, []string{"mode"})
	m.namespaces = map[string]bool{}
	reg.MustRegister(m.decisions, m.lookupSeconds, m.mode,
		versioncollector.NewCollector("sandbox_fence", versioncollector.WithExtraConstLabels(prometheus.Labels{"version": buildinfo.Version()})))
	m.SetMode(enforcement.Deny)
	return m
}

// SetMode records the enforcement mode the webhook runs in.
func (m *Metrics) SetMode(mode enforcement.Mode) {
	if m == nil {
		return
	}
	for _, x := range enforcement.Modes {
		v := 0.0
		if x == mode {
			v = 1
		}
		m.mode.WithLabelValues(string(x)).Set(v)
	}
}

func (m *Metrics) decision(rule, verdict, namespace string) {
	if m != nil {
		m.decisions.WithLabelValues(rule, verdict, m.namespaceLabel(namespace)).Inc()
	}
}

// namespaceLabel keeps the label's cardinality at MaxNamespaceLabels + 1.
func (m *Metrics) namespaceLabel(ns string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.namespaces[ns] {
		return ns
	}
	if len(m.namespaces) >= MaxNamespaceLabels {
		return OtherNamespace
	}
	m.namespaces[ns] = true
	return ns
}

func (m *Metrics) lookup(kind, source, result string, d time.Duration) {
	if m != nil {
		m.lookupSeconds.WithLabelValues(kind, source, result).Observe(d.Seconds())
	}
}
