// Command apf shows whether the webhook's owner reads time out when the API
// server is overloaded with the host writes they gate (docs/webhook.md,
// Priority and fairness). On the local control plane, with API Priority and
// Fairness on as in every real cluster, the bound hosts send dry-run creates
// of a valid per-sandbox policy for their own claims from many concurrent
// clients, more than the API server serves, for a bounded window, twice in
// one run: with the shipped FlowSchema sandbox-fence-webhook, and with it
// deleted. For each it reports the webhook's owner-read latency (its
// histogram sandbox_fence_webhook_owner_lookup_duration_seconds), how many
// host writes the webhook answered 503 because the owner read timed out
// ("could not be verified") and how the others ended, whether the webhook
// process survived, and the API server's APF queue waits and rejections by
// flow schema and priority level.
//
//	go -C e2e run ./bench/apf [-clients 700] [-hosts 2] [-window 30s] [-max-requests-inflight 20] [-max-mutating-requests-inflight 10]
//
// Two hosts by default: APF queues each user's requests as a flow of its
// own and serves flows fairly, so one host's flood competes with the
// webhook's reads as one flow against one; a second host is enough for the
// reads' fair share to fall below what the gated writes need.
//
// The inflight limits are passed to kube-apiserver for this measurement
// only (0: its default). With its defaults (400 and 200: 600 seats) two
// cores run out of CPU before APF runs out of seats: requests queue, but a
// read APF dispatches at once still waits seconds for the CPU, with or
// without the FlowSchema. Fewer seats make them, not the CPU, what the
// writes wait for, as on a control plane sized for its load.
// It starts and stops its own control plane on loopback and stops by itself.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/e2e/provider"
	"github.com/sandbox-fence/sandbox-fence/internal/webhook"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// flowSchema is the shipped FlowSchema (config/webhook/base/flowschema.yaml).
const flowSchema = "sandbox-fence-webhook"

type options struct {
	clients        int
	hosts          int
	window         time.Duration
	requestTimeout time.Duration
	maxInflight    int
	maxMutating    int
}

var logf = framework.StderrLogf("apf")

func main() {
	var o options
	flag.IntVar(&o.clients, "clients", 700, "concurrent host clients, each sending one dry-run create after another")
	flag.IntVar(&o.hosts, "hosts", 2, "bound hosts the clients are spread over (1: the host, 2: and the other host), each writing for its own claim in its own namespace")
	flag.DurationVar(&o.window, "window", 30*time.Second, "how long each configuration is loaded (at most 60s)")
	flag.DurationVar(&o.requestTimeout, "request-timeout", 20*time.Second, "client-side limit of one host write; the window's last writes are waited for up to this")
	flag.IntVar(&o.maxInflight, "max-requests-inflight", 20, "kube-apiserver --max-requests-inflight for this run (0: its default, 400)")
	flag.IntVar(&o.maxMutating, "max-mutating-requests-inflight", 10, "kube-apiserver --max-mutating-requests-inflight for this run (0: its default, 200)")
	flag.Parse()
	if o.window <= 0 || o.window > time.Minute || o.clients < 1 || o.hosts < 1 || o.hosts > 2 {
		fmt.Fprintln(os.Stderr, "-window must be in (0, 60s], -clients positive, -hosts 1 or 2")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	if err := run(ctx, o); err != nil {
		logf("FAILED after %s: %v", time.Since(start).Round(time.Second), err)
		os.Exit(1)
	}
	logf("done in %s", time.Since(start).Round(time.Second))
}

// config is one of the two measured configurations.
type config struct {
	name   string
	delete bool // delete the FlowSchema first
}

// measured is what one configuration's window produced.
type measured struct {
	config     config
	classifier string // the FlowSchema that classified a read as the webhook, before the window
	outcomes   map[string]int
	admitted   []time.Duration
	sent       int
	lookups    histDelta // live owner read attempts (SandboxClaim) by the webhook
	lookupErrs float64
	errVerdict float64
	waits      map[string]histDelta // APF queue wait by flow schema/priority level/execute
	rejected   map[string]float64   // APF rejections by flow schema/priority level/reason
	peakQueued map[string]float64   // APF requests in queue by priority level, peak of the samples
	seats      map[string]float64   // APF nominal seats by priority level
	// exited is the end of the webhook's log when it exited during the
	// window (its metrics went with it).
	exited string
}

func run(ctx context.Context, o options) (err error) {
	p, err := provider.NewLocal("apf", logf)
	if err != nil {
		return err
	}
	if o.maxInflight > 0 {
		p.ExtraAPIServerArgs = append(p.ExtraAPIServerArgs, "--max-requests-inflight="+strconv.Itoa(o.maxInflight))
	}
	if o.maxMutating > 0 {
		p.ExtraAPIServerArgs = append(p.ExtraAPIServerArgs, "--max-mutating-requests-inflight="+strconv.Itoa(o.maxMutating))
	}
	env, err := p.Setup(ctx)
	defer func() {
		if terr := p.Teardown(context.WithoutCancel(ctx), err != nil, ""); terr != nil {
			err = errors.Join(err, terr)
		}
	}()
	if err != nil {
		return err
	}
	if !env.WebhookInstalled {
		return errors.New("the local webhook is not installed")
	}
	fc := env.Admin.Kube.FlowcontrolV1()
	fs, err := fc.FlowSchemas().Get(ctx, flowSchema, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("the shipped FlowSchema (is priority and fairness on?): %w", err)
	}
	if _, err := fc.PriorityLevelConfigurations().Get(ctx, fs.Spec.PriorityLevelConfiguration.Name, metav1.GetOptions{}); err != nil {
		return fmt.Errorf("FlowSchema %s names priority level %s: %w", flowSchema, fs.Spec.PriorityLevelConfiguration.Name, err)
	}

	// Each host's claim, with the per-sandbox label, and a writer of its
	// valid policy.
	const claimName = "apf-claim"
	hosts := []struct {
		id *framework.Identity
		ns string
	}{{env.Host, env.HostNamespace}, {env.OtherHost, env.OtherHostNamespace}}[:o.hosts]
	var writers []*writer
	for _, h := range hosts {
		w, err := newWriter(ctx, h.id, h.ns, claimName, o.requestTimeout)
		if err != nil {
			return err
		}
		if code, msg := w.write(ctx); code != http.StatusCreated && code != http.StatusOK {
			return fmt.Errorf("%s's dry-run create before any load: %d %s", h.id.Username, code, msg)
		}
		writers = append(writers, w)
	}

	// A read as the webhook's ServiceAccount tells which FlowSchema
	// classifies the webhook's reads (the API server names it in a header).
	probe, err := newProbe(ctx, env, env.HostNamespace, claimName)
	if err != nil {
		return err
	}
	scraper, err := env.ScraperToken(ctx, framework.MetricsScraper, true)
	if err != nil {
		return err
	}
	eps, closeEps, err := env.WebhookMetrics.Open(ctx)
	if err != nil {
		return err
	}
	defer closeEps()

	logf("machine: %d CPUs (runtime.NumCPU), load %s; %d clients, window %s, kube-apiserver %v",
		runtime.NumCPU(), loadavg(), o.clients, o.window, p.ExtraAPIServerArgs)
	var results []measured
	for _, c := range []config{{name: "with the FlowSchema"}, {name: "without it (deleted)", delete: true}} {
		if c.delete {
			if err := fc.FlowSchemas().Delete(ctx, flowSchema, metav1.DeleteOptions{}); err != nil {
				return err
			}
		}
		m, err := measure(ctx, o, env, c, writers, probe, eps, scraper, p)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		results = append(results, m)
		if m.exited != "" {
			logf("%s: the webhook exited during the window; starting it again", c.name)
			if err := env.WebhookProcess.Start(ctx); err != nil {
				return err
			}
		}
	}
	fmt.Print(report(o, p.ExtraAPIServerArgs, results))
	return nil
}

// writer sends a host's dry-run create of its valid policy, without
// client-go's retries, so every answer of the API server is counted.
type writer struct {
	hc      *http.Client
	url     string
	body    []byte
	timeout time.Duration
}

// newWriter creates the host's claim, with the per-sandbox label, in ns.
func newWriter(ctx context.Context, host *framework.Identity, ns, claimName string, timeout time.Duration) (*writer, error) {
	claim, err := host.Dynamic.Resource(framework.ClaimGVR).Namespace(ns).Create(ctx,
		framework.MakeClaim(ns, claimName).PodLabel(fence.DefaultPerSandboxLabelKey, claimName).Obj(), metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create the claim as %s: %w", host.Username, err)
	}
	policy, err := fence.BuildPerSandboxPolicy(fence.PolicyInput{
		Owner:     fence.PolicyOwner{Kind: "SandboxClaim", Name: claimName, UID: string(claim.GetUID())},
		Namespace: ns, Hosts: []string{"registry.npmjs.org", ".example.com"},
	})
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(policy.Object)
	if err != nil {
		return nil, err
	}
	hc, err := rest.HTTPClientFor(host.Config)
	if err != nil {
		return nil, err
	}
	gvr := framework.CNPGVR
	return &writer{hc: hc, body: body, timeout: timeout,
		url: fmt.Sprintf("%s/apis/%s/%s/namespaces/%s/%s?dryRun=All", host.Config.Host, gvr.Group, gvr.Version, ns, gvr.Resource)}, nil
}

// write returns the status code (0: no answer) and the message. After a
// 429 it waits the Retry-After the API server asked for, as client-go does,
// so that the overload is of writes, not of refusals.
func (w *writer) write(ctx context.Context) (int, string) {
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(w.body))
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.hc.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusTooManyRequests {
		secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if err != nil || secs < 1 {
			secs = 1
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(secs) * time.Second):
		}
	}
	if resp.StatusCode < 300 {
		return resp.StatusCode, ""
	}
	var st metav1.Status
	if json.Unmarshal(b, &st) == nil && st.Message != "" {
		return resp.StatusCode, st.Message
	}
	return resp.StatusCode, string(b)
}

// classify names an answer to the host's write.
func classify(code int, msg string) string {
	switch {
	case code == http.StatusCreated || code == http.StatusOK:
		return "admitted"
	case code == 0:
		return "no answer within the client's timeout"
	case code == http.StatusServiceUnavailable && strings.Contains(msg, "could not be verified"):
		return "503 from the webhook: owner read timed out"
	case code == http.StatusTooManyRequests:
		return "429 from the API server (APF)"
	case strings.Contains(msg, "failed calling webhook") && strings.Contains(msg, "connection refused"):
		return fmt.Sprintf("%d: the webhook was down", code)
	case strings.Contains(msg, "failed calling webhook") && (strings.Contains(msg, "deadline exceeded") || strings.Contains(msg, "timeout")):
		return fmt.Sprintf("%d: the API server's call to the webhook timed out", code)
	case strings.Contains(msg, "failed calling webhook"):
		return fmt.Sprintf("%d: the API server's call to the webhook failed: %.80s", code, msg)
	}
	return fmt.Sprintf("%d other: %.80s", code, msg)
}

// probe reads the claim as the webhook's ServiceAccount.
type probe struct {
	hc  *http.Client
	url string
	fcs func(ctx context.Context) (map[string]string, error) // FlowSchema UID -> name
}

func newProbe(ctx context.Context, env *framework.Env, ns, claim string) (*probe, error) {
	tr, err := env.Admin.Kube.CoreV1().ServiceAccounts(framework.WebhookNamespace).CreateToken(ctx, framework.WebhookName,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{}}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	cfg := rest.AnonymousClientConfig(env.Admin.Config)
	cfg.BearerToken = tr.Status.Token
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	gvr := framework.ClaimGVR
	return &probe{hc: hc, url: fmt.Sprintf("%s/apis/%s/%s/namespaces/%s/%s/%s", cfg.Host, gvr.Group, gvr.Version, ns, gvr.Resource, claim),
		fcs: func(ctx context.Context) (map[string]string, error) {
			l, err := env.Admin.Kube.FlowcontrolV1().FlowSchemas().List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			out := map[string]string{}
			for _, f := range l.Items {
				out[string(f.UID)] = f.Name + " -> " + f.Spec.PriorityLevelConfiguration.Name
			}
			return out, nil
		}}, nil
}

// classifier returns the FlowSchema (and its priority level) that
// classified a read as the webhook's ServiceAccount.
func (p *probe) classifier(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
	if err != nil {
		return "", err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET the claim as the webhook: %s", resp.Status)
	}
	uid := resp.Header.Get(flowcontrolv1.ResponseHeaderMatchedFlowSchemaUID)
	names, err := p.fcs(ctx)
	if err != nil {
		return "", err
	}
	if n, ok := names[uid]; ok {
		return n, nil
	}
	return "", fmt.Errorf("no FlowSchema has uid %q", uid)
}

func measure(ctx context.Context, o options, env *framework.Env, c config, ws []*writer, p *probe, eps []framework.MetricsEndpoint, scraper string, local *provider.Local) (measured, error) {
	m := measured{config: c, outcomes: map[string]int{}, peakQueued: map[string]float64{}}
	// Wait until the API server classifies the webhook's reads as this
	// configuration says, and its queues are empty.
	err := framework.Eventually(ctx, 30*time.Second, 200*time.Millisecond, "the webhook's reads classified for "+c.name, func(ctx context.Context) (bool, string, error) {
		got, err := p.classifier(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		m.classifier = got
		return strings.HasPrefix(got, flowSchema+" ") != c.delete, got, nil
	})
	if err != nil {
		return m, err
	}
	err = framework.Eventually(ctx, 30*time.Second, 500*time.Millisecond, "no request in an APF queue", func(ctx context.Context) (bool, string, error) {
		body, err := env.APIServerMetrics(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		q := framework.MetricSum(body, "apiserver_flowcontrol_current_inqueue_requests")
		return q == 0, fmt.Sprint(q, " queued"), nil
	})
	if err != nil {
		return m, err
	}
	logf("%s: the webhook's reads are classified by %s; loading for %s", c.name, m.classifier, o.window)

	apiBefore, err := env.APIServerMetrics(ctx)
	if err != nil {
		return m, err
	}
	whBefore, err := scrapeWebhook(ctx, eps, scraper)
	if err != nil {
		return m, err
	}

	var mu sync.Mutex
	var wg sync.WaitGroup
	end := time.Now().Add(o.window)
	for i := range o.clients {
		w := ws[i%len(ws)]
		wg.Go(func() {
			for time.Now().Before(end) && ctx.Err() == nil {
				t := time.Now()
				code, msg := w.write(ctx)
				d := time.Since(t)
				k := classify(code, msg)
				mu.Lock()
				m.sent++
				m.outcomes[k]++
				if k == "admitted" {
					m.admitted = append(m.admitted, d)
				}
				mu.Unlock()
			}
		})
	}
	// Sample the APF queues while the load runs (the admin is exempt), and
	// the webhook's metrics, which a webhook that exits takes with it.
	sampled := make(chan struct{}, 2)
	go func() {
		defer func() { sampled <- struct{}{} }()
		for time.Now().Before(end) && ctx.Err() == nil {
			if body, err := env.APIServerMetrics(ctx); err == nil {
				for _, pl := range []string{"workload-low", "workload-high"} {
					q := framework.MetricSum(body, "apiserver_flowcontrol_current_inqueue_requests", `priority_level="`+pl+`"`)
					m.peakQueued[pl] = math.Max(m.peakQueued[pl], q)
				}
			}
			time.Sleep(time.Second)
		}
	}()
	whLast := whBefore
	go func() {
		defer func() { sampled <- struct{}{} }()
		for time.Now().Before(end) && ctx.Err() == nil {
			if body, err := scrapeWebhook(ctx, eps, scraper); err == nil {
				whLast = body
			}
			time.Sleep(time.Second)
		}
	}()
	wg.Wait()
	<-sampled
	<-sampled
	if ctx.Err() != nil {
		return m, ctx.Err()
	}

	apiAfter, err := env.APIServerMetrics(ctx)
	if err != nil {
		return m, err
	}
	proc, err := local.Component("webhook")
	if err != nil {
		return m, err
	}
	whAfter := whLast
	if exited, werr := proc.Exited(); exited {
		m.exited = fmt.Sprintf("%v; %s", werr, lastLine(proc.Tail(1)))
	} else if whAfter, err = scrapeWebhook(ctx, eps, scraper); err != nil {
		return m, err
	}
	live := []string{`kind="SandboxClaim"`, `source="live"`}
	m.lookups = delta(hist(whBefore, webhook.LookupSecondsMetric, live...), hist(whAfter, webhook.LookupSecondsMetric, live...))
	errLabels := append(slices.Clone(live), `result="error"`)
	m.lookupErrs = framework.MetricSum(whAfter, webhook.LookupSecondsMetric+"_count", errLabels...) - framework.MetricSum(whBefore, webhook.LookupSecondsMetric+"_count", errLabels...)
	m.errVerdict = framework.MetricSum(whAfter, webhook.DecisionsMetric, `verdict="`+webhook.VerdictError+`"`) -
		framework.MetricSum(whBefore, webhook.DecisionsMetric, `verdict="`+webhook.VerdictError+`"`)
	m.waits = map[string]histDelta{}
	m.rejected = map[string]float64{}
	for _, fsName := range []string{flowSchema, "service-accounts"} {
		for _, exec := range []string{"true", "false"} {
			l := []string{`flow_schema="` + fsName + `"`, `execute="` + exec + `"`}
			d := delta(hist(apiBefore, "apiserver_flowcontrol_request_wait_duration_seconds", l...), hist(apiAfter, "apiserver_flowcontrol_request_wait_duration_seconds", l...))
			if d.count > 0 {
				m.waits[fsName+" ("+plOf(apiAfter, fsName)+"), executed="+exec] = d
			}
		}
		for _, reason := range []string{"queue-full", "time-out", "concurrency-limit", "cancelled"} {
			l := []string{`flow_schema="` + fsName + `"`, `reason="` + reason + `"`}
			if v := framework.MetricSum(apiAfter, "apiserver_flowcontrol_rejected_requests_total", l...) - framework.MetricSum(apiBefore, "apiserver_flowcontrol_rejected_requests_total", l...); v > 0 {
				m.rejected[fsName+" "+reason] = v
			}
		}
	}
	m.seats = map[string]float64{}
	for _, pl := range []string{"workload-low", "workload-high"} {
		m.seats[pl] = framework.MetricSum(apiAfter, "apiserver_flowcontrol_nominal_limit_seats", `priority_level="`+pl+`"`)
	}
	return m, nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// plOf is the priority level a flow schema's samples name.
func plOf(body, fsName string) string {
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "apiserver_flowcontrol_request_wait_duration_seconds_count{") && strings.Contains(l, `flow_schema="`+fsName+`"`) {
			if _, rest, ok := strings.Cut(l, `priority_level="`); ok {
				pl, _, _ := strings.Cut(rest, `"`)
				return pl
			}
		}
	}
	return "?"
}

func scrapeWebhook(ctx context.Context, eps []framework.MetricsEndpoint, token string) (string, error) {
	var b strings.Builder
	for _, ep := range eps {
		code, body, err := ep.Scrape(ctx, token)
		if err != nil {
			return "", err
		}
		if code != http.StatusOK {
			return "", fmt.Errorf("webhook %s /metrics: %d", ep.Replica, code)
		}
		b.WriteString(body)
	}
	return b.String(), nil
}

// histDelta is a histogram's cumulative bucket counts over a window.
type histDelta struct {
	les   []float64
	cum   map[float64]float64
	count float64
	sum   float64
}

// hist sums the buckets of a histogram's series that carry every label.
func hist(body, name string, labels ...string) histDelta {
	h := histDelta{cum: map[float64]float64{}}
	for _, l := range strings.Split(body, "\n") {
		match := true
		for _, want := range labels {
			match = match && strings.Contains(l, want)
		}
		if !match {
			continue
		}
		v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(l, name+"_bucket{"):
			_, rest, _ := strings.Cut(l, `le="`)
			s, _, _ := strings.Cut(rest, `"`)
			le, err := strconv.ParseFloat(s, 64)
			if err != nil {
				continue
			}
			if _, seen := h.cum[le]; !seen {
				h.les = append(h.les, le)
			}
			h.cum[le] += v
		case strings.HasPrefix(l, name+"_count{"):
			h.count += v
		case strings.HasPrefix(l, name+"_sum{"):
			h.sum += v
		}
	}
	slices.Sort(h.les)
	return h
}

func delta(before, after histDelta) histDelta {
	d := histDelta{les: after.les, cum: map[float64]float64{}, count: after.count - before.count, sum: after.sum - before.sum}
	for _, le := range after.les {
		d.cum[le] = after.cum[le] - before.cum[le]
	}
	return d
}

// quantile is the upper bound of the bucket holding quantile q.
func (h histDelta) quantile(q float64) string {
	if h.count == 0 {
		return "-"
	}
	for _, le := range h.les {
		if h.cum[le] >= q*h.count {
			if math.IsInf(le, 1) {
				return "> " + fmtSeconds(h.les[len(h.les)-2])
			}
			return "≤ " + fmtSeconds(le)
		}
	}
	return "?"
}

// over is how many observations exceeded bound seconds.
func (h histDelta) over(bound float64) float64 {
	return h.count - h.cum[bound]
}

func (h histDelta) String() string {
	if h.count == 0 {
		return "none"
	}
	return fmt.Sprintf("n=%.0f, mean %s, p50 %s, p99 %s", h.count, fmtSeconds(h.sum/h.count), h.quantile(0.5), h.quantile(0.99))
}

func fmtSeconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(100 * time.Microsecond).String()
}

func percentile(ds []time.Duration, q float64) string {
	if len(ds) == 0 {
		return "-"
	}
	slices.Sort(ds)
	return ds[int(q*float64(len(ds)-1))].Round(time.Millisecond).String()
}

func report(o options, args []string, ms []measured) string {
	var b strings.Builder
	limits := "kube-apiserver defaults"
	if len(args) > 0 {
		limits = strings.Join(args, " ")
	}
	fmt.Fprintf(&b, "\n%d clients over %d bound hosts, dry-run creates of a valid per-sandbox policy for the host's own claim, %s per configuration; %s; %d CPUs, load %s\n\n",
		o.clients, o.hosts, o.window, limits, runtime.NumCPU(), loadavg())
	fmt.Fprintf(&b, "| figure |")
	for _, m := range ms {
		fmt.Fprintf(&b, " %s |", m.config.name)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(ms)) + "\n")
	row := func(name string, f func(m measured) string) {
		fmt.Fprintf(&b, "| %s |", name)
		for _, m := range ms {
			fmt.Fprintf(&b, " %s |", f(m))
		}
		b.WriteString("\n")
	}
	row("the webhook's reads classified by (FlowSchema -> priority level)", func(m measured) string { return m.classifier })
	row("host writes sent", func(m measured) string { return fmt.Sprint(m.sent) })
	var kinds []string
	for _, m := range ms {
		for k := range m.outcomes {
			if !slices.Contains(kinds, k) {
				kinds = append(kinds, k)
			}
		}
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		row("  "+k, func(m measured) string { return fmt.Sprint(m.outcomes[k]) })
	}
	row("admitted write latency p50 / p99", func(m measured) string {
		return percentile(m.admitted, 0.5) + " / " + percentile(m.admitted, 0.99)
	})
	row("webhook process exited during the window", func(m measured) string {
		if m.exited == "" {
			return "no"
		}
		return "**yes** (its metrics below end at its last scrape, at most 1 s before): " + m.exited
	})
	row("webhook live owner read attempts (SandboxClaim; 1 s each, retried within 3 s)", func(m measured) string { return m.lookups.String() })
	row("  of which took 1 s or more", func(m measured) string { return fmt.Sprint(m.lookups.over(1)) })
	row("  of which got no answer or an error (result=error)", func(m measured) string { return fmt.Sprint(m.lookupErrs) })
	row("webhook decisions verdict=error (its 503s)", func(m measured) string { return fmt.Sprint(m.errVerdict) })
	var waitKeys, rejKeys []string
	for _, m := range ms {
		for k := range m.waits {
			if !slices.Contains(waitKeys, k) {
				waitKeys = append(waitKeys, k)
			}
		}
		for k := range m.rejected {
			if !slices.Contains(rejKeys, k) {
				rejKeys = append(rejKeys, k)
			}
		}
	}
	slices.Sort(waitKeys)
	slices.Sort(rejKeys)
	for _, k := range waitKeys {
		row("APF queue wait, "+k, func(m measured) string { return m.waits[k].String() })
	}
	for _, k := range rejKeys {
		row("APF rejected, "+k, func(m measured) string { return fmt.Sprint(m.rejected[k]) })
	}
	for _, pl := range []string{"workload-low", "workload-high"} {
		row("APF peak requests queued in "+pl+" (1 s samples)", func(m measured) string { return fmt.Sprint(m.peakQueued[pl]) })
		row("APF nominal seats of "+pl, func(m measured) string { return fmt.Sprint(m.seats[pl]) })
	}
	return b.String()
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
