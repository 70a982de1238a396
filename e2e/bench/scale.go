package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/e2e/provider"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// scaleNamespace holds the owners a scale run adds. The webhook's informers
// watch claims and Sandboxes in every namespace, so where they live does not
// matter to what it caches.
const scaleNamespace = "bench-scale"

// runScale measures the webhook against the number of owners its informers
// hold (-scale), with each owner read of scaleModes: for each count it tops
// the Sandboxes up to it, restarts the webhook (without its shutdown drain),
// and records the restart until
// /readyz answers (which waits for the informers to sync), the webhook's
// resident memory, the host's per-sandbox policy create+delete at one
// client and the API server's mean wait for the webhook in that window,
// then, at throughputClients, the reviews per second of webhook CPU, the
// owner read against this API server included: at one client the process's
// fixed costs (watches, lease renewals, collections) would be most of it.
func runScale(ctx context.Context, o options, p *provider.Local, env *framework.Env, hc *hostClients, cnp workload, m meter) (string, error) {
	cfg := rest.CopyConfig(env.Admin.Config)
	cfg.QPS, cfg.Burst = -1, 0
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scaleNamespace}}
	if _, err := env.Admin.Kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	// Restarts measure the new process: the old one stops without the
	// connection drain it does in a rollout.
	if _, err := p.RestartWebhookWith(ctx, "--shutdown-drain=0s"); err != nil {
		return "", err
	}
	var md strings.Builder
	md.WriteString(fmt.Sprintf("| owners | owner read | created in | webhook restart to ready | webhook RSS MiB | kube-apiserver RSS MiB | cnp ops | p50 ms | p99 ms | "+
		"API server's mean wait for the webhook ms | reviews per webhook CPU-second (%d clients) |\n", throughputClients))
	md.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	have := 0
	for _, n := range o.scale {
		t0 := time.Now()
		if err := topUp(ctx, dyn, have, n); err != nil {
			return "", err
		}
		created := time.Since(t0)
		have = n
		for _, mode := range scaleModes {
			t1 := time.Now()
			wp, err := p.RestartWebhookWith(ctx, mode.flag)
			if err != nil {
				return "", fmt.Errorf("%d owners, %s: %w", n, mode.name, err)
			}
			ready := time.Since(t1)
			m.pids["webhook"] = wp.Pid
			if s, _ := runWindow(ctx, hc, cnp, 1, o.warmup); s.errs > 0 {
				return "", fmt.Errorf("%d owners, warm-up: %w", n, s.firstErr)
			}
			one, err := scaleWindow(ctx, env, hc, cnp, m, 1, o.window)
			if err != nil {
				return "", fmt.Errorf("%d owners: %w", n, err)
			}
			many, err := scaleWindow(ctx, env, hc, cnp, m, throughputClients, o.window)
			if err != nil {
				return "", fmt.Errorf("%d owners: %w", n, err)
			}
			sum := summarise([]*cellResult{{clients: 1, elapsed: one.elapsed, sink: one.sink}})
			rss := m.rssMiB()
			perCPU := math.NaN()
			if c := many.cpu["webhook"].Seconds(); c > 0 {
				perCPU = many.reviews / c
			}
			row := fmt.Sprintf("| %d | %s | %s | %s | %.0f | %.0f | %d | %s | %s | %.2f | %.0f |", n, mode.name, created.Round(time.Second), ready.Round(10*time.Millisecond),
				rss["webhook"], rss["kube-apiserver"], len(one.sink.ops), ms(sum.P50), ms(sum.P99), 1000*one.waited/one.reviews, perCPU)
			logf("scale %s", row)
			md.WriteString(row + "\n")
		}
	}
	return md.String(), nil
}

// scaleModes are the webhook's two owner reads: the shipped live read, and
// --owner-cache-first (docs/webhook.md, Caching).
var scaleModes = []struct{ name, flag string }{
	{"live", "--owner-cache-first=false"},
	{"cache-first", "--owner-cache-first=true"},
}

// throughputClients is the scale run's second window, whose webhook CPU per
// review is the table's throughput figure.
const throughputClients = 8

// scaleMeasure is one window of the scale run.
type scaleMeasure struct {
	sink    *sink
	elapsed time.Duration
	cpu     map[string]time.Duration
	// reviews and waited are the API server's count of calls to the webhook
	// in the window and the seconds it waited for them.
	reviews, waited float64
}

// scaleWindow runs clients workers of w for d and reads what the API server
// and the metered processes spent on it.
func scaleWindow(ctx context.Context, env *framework.Env, hc *hostClients, w workload, m meter, clients int, d time.Duration) (*scaleMeasure, error) {
	before, err := scrapeMetrics(ctx, env.Admin.Kube)
	if err != nil {
		return nil, err
	}
	cpu0 := m.cpu()
	s, el := runWindow(ctx, hc, w, clients, d)
	out := &scaleMeasure{sink: s, elapsed: el, cpu: diffCPU(m.cpu(), cpu0)}
	if s.errs > 0 {
		return nil, fmt.Errorf("%d clients: %d of %d operations failed; first: %w", clients, s.errs, s.errs+len(s.ops), s.firstErr)
	}
	after, err := scrapeMetrics(ctx, env.Admin.Kube)
	if err != nil {
		return nil, err
	}
	for _, h := range after.diff(before)[webhookMetric] {
		out.reviews += h.count
		out.waited += h.sum
	}
	return out, nil
}

// topUp creates Sandboxes from..to-1 in scaleNamespace, as the admin, 16 at
// a time: each carries a pod template and the per-sandbox pod label, as a
// host's do, so the webhook's cache trims and indexes it like any owner.
func topUp(ctx context.Context, dyn dynamic.Interface, from, to int) error {
	ri := dyn.Resource(framework.SandboxGVR).Namespace(scaleNamespace)
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < to && ctx.Err() == nil; i = int(next.Add(1) - 1) {
				name := fmt.Sprintf("scale-%06d", i)
				obj := framework.MakeSandbox(scaleNamespace, name).PodLabel(fence.DefaultPerSandboxLabelKey, name).Obj()
				if _, err := ri.Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					errs <- fmt.Errorf("create sandbox %s/%s: %w", scaleNamespace, name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// scaleReport runs runScale and writes its table (scale-results.md in -out).
func scaleReport(ctx context.Context, o options, p *provider.Local, env *framework.Env, hc *hostClients, cnp workload, m meter, start time.Time, load0 string) error {
	table, err := runScale(ctx, o, p, env, hc, cnp, m)
	if err != nil {
		return err
	}
	var md strings.Builder
	fmt.Fprintf(&md, "Per owner count and owner read, a %s warm-up, then a %s window at one client and one at %d; GOMAXPROCS %d, wall time %s.\n\n",
		o.warmup, o.window, throughputClients, runtime.GOMAXPROCS(0), time.Since(start).Round(time.Second))
	fmt.Fprintf(&md, "Load average (1, 5, 15 min): %s at start, %s at the end.\n\n", load0, loadavg())
	fmt.Fprintf(&md, "The cnp workload (%s) against the webhook with each owner read, the owners of each row as Sandboxes in %s; "+
		"latency and the API server's wait from the one-client window, CPU per review from the other:\n\n", cnp.Requests, scaleNamespace)
	md.WriteString(table + "\n")
	fmt.Println(md.String())
	if o.out == "" {
		return nil
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	path := filepath.Join(o.out, "scale-results.md")
	logf("wrote %s", path)
	return os.WriteFile(path, []byte(md.String()), 0o644)
}
