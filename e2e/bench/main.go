// Command bench measures what the fence costs a cluster (issue 6): in ONE
// run on the local control plane, three configurations — no fence, the
// ValidatingAdmissionPolicies only, the policies plus the webhook — are
// interleaved round by round, and three host workloads (fenced Sandbox
// writes through pkg/fence, per-sandbox CiliumNetworkPolicy create+delete
// whose owner the webhook verifies, unrelated ConfigMap writes as the
// control) run at 1, 8 and 32 clients in each. Every cell is compared with
// the baseline cell of the same run, and the apiserver's own admission
// histograms for our policies and webhook are quoted from the same run.
//
//	go -C e2e run ./bench [-rounds 4] [-window 1500ms] [-peers] [-out bin/bench]
//
// With -peers, Kyverno and Gatekeeper enforcing the same fence
// (e2e/bench/peers) are two more configurations of the same run, and every
// window also charges the CPU time of the apiserver and of each engine
// process to the admissions it served.
//
// It starts and stops its own control plane on loopback, and stops by
// itself: the total is bounded by rounds x configurations x 9 windows plus
// switches.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandbox-fence/sandbox-fence/e2e/bench/chart"
	"github.com/sandbox-fence/sandbox-fence/e2e/cluster"
	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/e2e/peers"
	"github.com/sandbox-fence/sandbox-fence/e2e/provider"
)

type options struct {
	rounds      int
	window      time.Duration
	warmup      time.Duration
	concurrency []int
	out         string
	waitLoad    float64
	waitLoadMax time.Duration
	// peers adds the kyverno and gatekeeper configurations.
	peers bool
	// liveRead and aa add the optional configurations (configs.go).
	liveRead, aa bool
	seed         uint64
	open         float64
	// profileDir receives CPU profiles of the apiserver (cnp, 1 client).
	profileDir string
	profileFor time.Duration
	// scale, when set, measures the webhook against these owner counts
	// instead (scale.go).
	scale []int
}

var logf = framework.StderrLogf("bench")

func main() {
	var o options
	var conc, scale string
	flag.IntVar(&o.rounds, "rounds", 4, "measured rounds; each runs every configuration once, in a random order (-seed)")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the rounds' configuration orders")
	flag.Float64Var(&o.open, "open", 0, "also run each workload in an open loop at this fraction of the slowest configuration's closed-loop throughput at the most clients, over one -window in the warm-up round (0: none; needs -warmup)")
	flag.DurationVar(&o.window, "window", 1500*time.Millisecond, "duration of one cell's window")
	flag.DurationVar(&o.warmup, "warmup", 300*time.Millisecond, "window of the unrecorded warm-up round (0: none)")
	flag.StringVar(&conc, "concurrency", "1,8,32", "client counts")
	flag.StringVar(&scale, "scale", "", "instead of the configurations, measure the shipped webhook against these owner counts (e.g. 100,1000,10000,100000; scale.go)")
	flag.StringVar(&o.out, "out", "", "directory for results.md and latency.png (default: print only)")
	flag.Float64Var(&o.waitLoad, "wait-load", 0, "before starting, poll the 1-minute load average until it is below this (0: do not wait)")
	flag.DurationVar(&o.waitLoadMax, "wait-load-max", 10*time.Minute, "give up waiting for a low load after this long and run anyway (the load is reported)")
	flag.BoolVar(&o.peers, "peers", false, "also measure Kyverno and Gatekeeper enforcing the same fence (built by hack/peers/build.sh; e2e/peers)")
	flag.BoolVar(&o.liveRead, "live-read", false, "also measure the webhook with --owner-cache-first=false, against the shipped webhook, with a 95% interval per cell")
	flag.BoolVar(&o.aa, "aa", false, "also measure a second no-fence configuration against none (an A/A control: its interval must include 0)")
	flag.StringVar(&o.profileDir, "apiserver-profile", "", "after the rounds, profile the apiserver's CPU, and the webhook's where it runs, under the cnp workload at 1 client in every configuration, into this directory")
	flag.DurationVar(&o.profileFor, "profile-for", 10*time.Second, "length of each apiserver profile")
	flag.Parse()
	for _, s := range strings.Split(conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "-concurrency %q: want positive integers separated by commas\n", conc)
			os.Exit(2)
		}
		o.concurrency = append(o.concurrency, n)
	}
	for _, s := range strings.Split(scale, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || len(o.scale) > 0 && n <= o.scale[len(o.scale)-1] {
			fmt.Fprintf(os.Stderr, "-scale %q: want rising positive integers separated by commas\n", scale)
			os.Exit(2)
		}
		o.scale = append(o.scale, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		logf("FAILED: %v", err)
		os.Exit(1)
	}
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

func load1() float64 {
	f := strings.Fields(loadavg())
	if len(f) == 0 {
		return math.NaN()
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

// waitForLowLoad polls the load average: the machine is shared, and a
// measurement taken while others compile says more about them than about us.
func waitForLowLoad(ctx context.Context, o options) {
	if o.waitLoad <= 0 {
		return
	}
	start := time.Now()
	err := framework.Eventually(ctx, o.waitLoadMax, 5*time.Second, fmt.Sprintf("1-minute load below %.2f", o.waitLoad), func(context.Context) (bool, string, error) {
		return load1() < o.waitLoad, "load " + loadavg(), nil
	})
	if err != nil {
		logf("running anyway, the load is reported with the results: %v", err)
		return
	}
	logf("waited %s for a 1-minute load below %.2f: load %s", time.Since(start).Round(time.Second), o.waitLoad, loadavg())
}

func run(ctx context.Context, o options) (err error) {
	waitForLowLoad(ctx, o)
	runStart := time.Now()
	loadStart := loadavg()
	p, err := provider.NewLocal("bench", logf)
	if err != nil {
		return err
	}
	// Every engine's webhook is called at a non-loopback address, so that
	// the API server speaks HTTP/1.1 to each, as to a Service in a cluster.
	webhookIP := cluster.ServiceLikeIP()
	transport := "HTTP/1.1 (as to a Service-referenced webhook): every webhook is called at " + webhookIP.String()
	if webhookIP == nil {
		transport = "at 127.0.0.1, which the API server offers HTTP/2: this machine has no other address, so Gatekeeper, which answers HTTP/2, is spoken to in it"
	}
	logf("webhook transport: %s", transport)
	p.WebhookIP = webhookIP
	webhookPprof := ""
	if o.profileDir != "" {
		p.ExtraAPIServerArgs = []string{"--profiling=true"}
		port, err := cluster.FreePort()
		if err != nil {
			return err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		webhookPprof = "http://" + addr
		p.ExtraWebhookArgs = append(p.ExtraWebhookArgs, "--pprof-bind-address="+addr)
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
		return errors.New("the local webhook is not installed: the vaps+webhook configuration cannot be measured")
	}
	configs := configsFor(o.peers, o.liveRead, o.aa)
	engines := map[string]*peers.Engine{}
	if o.peers {
		for _, n := range peers.Names {
			e, err := peers.New(n, p.RepoRoot, filepath.Join(p.RepoRoot, "bin"), logf)
			if err != nil {
				return err
			}
			e.IP = webhookIP
			if err := e.Start(ctx, env, p.CP); err != nil {
				return err
			}
			engines[n] = e
		}
	}
	const malformed = "bench-malformed-epoch"
	if err := seedMalformed(ctx, env, malformed); err != nil {
		return err
	}
	if err := grantConfigMaps(ctx, env); err != nil {
		return err
	}
	hc, err := newHostClients(env)
	if err != nil {
		return err
	}
	fx, err := makeFixtures(ctx, env, hc, slices.Max(o.concurrency))
	if err != nil {
		return err
	}
	sw, err := newSwitcher(ctx, env, engines, malformed, logf)
	if err != nil {
		return err
	}
	m := newMeter(p.CP.Processes())
	if len(o.scale) > 0 {
		wls := workloads(hc, fx)
		cnp := wls[slices.IndexFunc(wls, func(w workload) bool { return w.Name == "cnp" })]
		return scaleReport(ctx, o, p, env, hc, cnp, m, runStart, loadStart)
	}
	sw.restartWebhook = func(ctx context.Context, flag string) error {
		wp, err := p.RestartWebhookWith(ctx, flag)
		if err == nil {
			m.pids["webhook"] = wp.Pid
		}
		return err
	}
	token, err := env.ScraperToken(ctx, framework.MetricsScraper, true)
	if err != nil {
		return err
	}
	ws := &webhookScraper{env: env, token: token}
	rss := map[string]map[string]float64{} // config -> process -> max MiB
	wls := workloads(hc, fx)
	logf("setup done in %s; load %s", time.Since(runStart).Round(100*time.Millisecond), loadavg())

	results := map[string][]*cellResult{} // key: config/workload/clients (openLoop: the open loop)
	warmBest := map[string]float64{}      // config/workload -> warm-up ops/s at the most clients
	openRate := map[string]float64{}      // workload -> the open loop's ops/s
	key := func(c, w string, n int) string { return fmt.Sprintf("%s/%s/%d", c, w, n) }
	var loads []string
	var switches []time.Duration
	perConfig := map[string]scrape{}
	for r := 0; r <= o.rounds; r++ {
		if r == 1 && o.open > 0 {
			for _, w := range wls {
				slowest := math.Inf(1)
				for _, c := range configs {
					slowest = min(slowest, warmBest[c.Name+"/"+w.Name])
				}
				if slowest > 0 && !math.IsInf(slowest, 1) {
					openRate[w.Name] = o.open * slowest
					logf("open loop for %s: %.0f ops/s (%.2f of the slowest configuration's %.0f ops/s at the most clients in the warm-up)", w.Name, openRate[w.Name], o.open, slowest)
				}
			}
		}
		warm := r == 0
		window := o.window
		if warm {
			if o.warmup <= 0 {
				continue
			}
			window = o.warmup
		}
		// A random order each round (seeded: -seed), so that drift (a
		// growing etcd, a neighbour's compile) and the order itself land on
		// every configuration alike.
		for _, k := range rand.New(rand.NewPCG(o.seed, uint64(r))).Perm(len(configs)) {
			c := configs[k]
			d, err := sw.install(ctx, c)
			if err != nil {
				return err
			}
			if !warm {
				switches = append(switches, d)
			}
			l0 := loadavg()
			before, err := scrapeMetrics(ctx, env.Admin.Kube)
			if err != nil {
				return err
			}
			for _, w := range wls {
				cells := o.concurrency
				if !warm && openRate[w.Name] > 0 {
					cells = append(slices.Clone(cells), openLoop)
				}
				for _, n := range cells {
					var owner0 scrape
					if c.Webhook && !warm {
						if owner0, err = ws.scrape(ctx); err != nil {
							return err
						}
					}
					cpu0 := m.cpu()
					var s *sink
					var el time.Duration
					// The capacity the open loop's rate derives from is
					// measured over a full window: short warm-up windows
					// measure a burst the API server does not sustain.
					capacity := warm && o.open > 0 && n == slices.Max(o.concurrency)
					switch {
					case n == openLoop:
						s, el = runOpenWindow(ctx, hc, w, openRate[w.Name], slices.Max(o.concurrency), window)
					case capacity:
						s, el = runWindow(ctx, hc, w, n, o.window)
					default:
						s, el = runWindow(ctx, hc, w, n, window)
					}
					cpu := diffCPU(m.cpu(), cpu0)
					var owner scrape
					if owner0 != nil {
						owner1, err := ws.scrape(ctx)
						if err != nil {
							return err
						}
						owner = owner1.diff(owner0)
					}
					if ctx.Err() != nil {
						return ctx.Err()
					}
					if s.errs > 0 {
						err := fmt.Errorf("round %d, %s/%s/%s clients: %d of %d operations failed; first: %w", r, c.Name, w.Name, clientsLabel(n), s.errs, s.errs+len(s.ops), s.firstErr)
						if !w.refusable {
							return err
						}
						logf("%v", err)
					}
					if capacity {
						warmBest[c.Name+"/"+w.Name] = float64(len(s.ops)) / el.Seconds()
					}
					if !warm {
						results[key(c.Name, w.Name, n)] = append(results[key(c.Name, w.Name, n)], &cellResult{round: r, config: c.Name, clients: n, elapsed: el, sink: s, cpu: cpu, owner: owner})
					}
				}
			}
			after, err := scrapeMetrics(ctx, env.Admin.Kube)
			if err != nil {
				return err
			}
			if !warm {
				if rss[c.Name] == nil {
					rss[c.Name] = map[string]float64{}
				}
				for proc, v := range m.rssMiB() {
					rss[c.Name][proc] = max(rss[c.Name][proc], v)
				}
				if perConfig[c.Name] == nil {
					perConfig[c.Name] = scrape{}
				}
				perConfig[c.Name].add(after.diff(before))
			}
			l1 := loadavg()
			tag := fmt.Sprintf("round %d", r)
			if warm {
				tag = "warm-up"
			}
			loads = append(loads, fmt.Sprintf("| %s | %s | %s | %s | %s |", tag, c.Name, d.Round(time.Millisecond), l0, l1))
			logf("%s %-13s switch %6s  load before %s  after %s", tag, c.Name, d.Round(time.Millisecond), l0, l1)
		}
	}
	loadEnd := loadavg()
	var profiles []string
	if o.profileDir != "" {
		if profiles, err = profileCPU(ctx, o, env, sw, hc, wls, configs, webhookPprof); err != nil {
			return err
		}
	}

	var md strings.Builder
	fmt.Fprintf(&md, "%d measured rounds + warm-up, window %s per cell, GOMAXPROCS %d, wall time %s.\n\n",
		o.rounds, o.window, runtime.GOMAXPROCS(0), time.Since(runStart).Round(time.Second))
	fmt.Fprintf(&md, "Load average (1, 5, 15 min): %s at start, %s at the end.\n\n", loadStart, loadEnd)
	if o.peers {
		for _, n := range peers.Names {
			fmt.Fprintf(&md, "%s %s, built from the Go module proxy (hack/peers/build.sh), its fence in e2e/bench/peers/%s, run as its release's ServiceAccount and RBAC (e2e/bench/peers/%s/rbac.yaml).\n", n, engines[n].Version(), n, n)
		}
		fmt.Fprintf(&md, "\nThe API server's transport to the webhooks: %s.\n\n", transport)
		md.WriteString(costReport(wls, o.concurrency, configs, results, key, rss))
	}
	for _, w := range wls {
		fmt.Fprintf(&md, "#### %s — %s\n\n", w.Name, w.Requests)
		md.WriteString("| clients | config | ops/s | ×baseline | per-round ops/s | p50 ms | p90 ms | p99 ms | Δp99 ms | write p50 ms | write p99 ms | Δwrite p99 ms | failed ops |\n")
		md.WriteString("|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, n := range o.concurrency {
			base := summarise(results[key("none", w.Name, n)])
			for _, c := range configs {
				s := summarise(results[key(c.Name, w.Name, n)])
				fmt.Fprintf(&md, "| %d | %s | %.0f | %.3f | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n",
					n, c.Name, s.Throughput, s.Throughput/base.Throughput, spread(s.PerRound),
					ms(s.P50), ms(s.P90), ms(s.P99), deltaMs(s.P99, base.P99),
					ms(s.WriteP50), ms(s.WriteP99), deltaMs(s.WriteP99, base.WriteP99), s.Errors)
			}
		}
		md.WriteString("\n")
	}
	paired := o.concurrency
	if len(openRate) > 0 {
		paired = append(slices.Clone(paired), openLoop)
		md.WriteString("Open loop (clients column `open`): each workload's operations sent at a fixed rate, each timed from its scheduled send:")
		for _, w := range wls {
			fmt.Fprintf(&md, " %s %.0f ops/s;", w.Name, openRate[w.Name])
		}
		fmt.Fprintf(&md, " %.2f of the slowest configuration's closed-loop throughput at the most clients, over one full window in the warm-up round.\n\n", o.open)
	}
	md.WriteString(pairedReport(wls, paired, configs, results, key))
	md.WriteString(ownerReadTable(wls, paired, configs, results, key))
	fmt.Fprintf(&md, "Configuration switches and load average (1, 5, 15 min) around each block of %d cells:\n\n", len(wls)*len(o.concurrency))
	md.WriteString("| round | config | switch observed after | load before | load after |\n|---|---|---:|---|---|\n")
	md.WriteString(strings.Join(loads, "\n") + "\n\n")
	md.WriteString("The apiserver's own admission histograms, summed over each configuration's measured blocks:\n\n")
	var order []string
	for _, c := range configs {
		order = append(order, c.Name)
	}
	md.WriteString(metricsTable(perConfig, order))
	if len(profiles) > 0 {
		md.WriteString("Apiserver CPU profiles (cnp workload, 1 client, after the rounds): " + strings.Join(profiles, ", ") + "\n\n")
	}
	fmt.Println(md.String())

	if o.out != "" {
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(o.out, "cluster-results.md"), []byte(md.String()), 0o644); err != nil {
			return err
		}
		if err := writeChart(filepath.Join(o.out, "latency.png"), wls, o.concurrency, configs, results, key, loadStart, loadEnd); err != nil {
			return err
		}
		logf("wrote %s and %s", filepath.Join(o.out, "cluster-results.md"), filepath.Join(o.out, "latency.png"))
	}
	logf("done in %s", time.Since(runStart).Round(time.Second))
	return nil
}

func writeChart(path string, wls []workload, conc []int, configs []config, results map[string][]*cellResult, key func(string, string, int) string, l0, l1 string) error {
	c := chart.Chart{
		Title:  "sandbox-fence: host operation latency per configuration (one interleaved run, local control plane, loopback)",
		Note:   fmt.Sprintf("operation = what the host sees (sandbox: GET+PATCH; cnp: POST+GET+DELETE; configmap: POST+DELETE). load avg %s -> %s", l0, l1),
		YLabel: "ms",
		Shades: []string{"p50", "p90", "p99"},
	}
	for _, cf := range configs {
		c.Series = append(c.Series, cf.Name)
	}
	for _, n := range conc {
		p := chart.Panel{Title: fmt.Sprintf("%d client(s)", n)}
		for _, w := range wls {
			g := chart.Group{Label: w.Name}
			for _, cf := range configs {
				s := summarise(results[key(cf.Name, w.Name, n)])
				toMs := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
				g.Values = append(g.Values, []float64{toMs(s.P50), toMs(s.P90), toMs(s.P99)})
			}
			p.Groups = append(p.Groups, g)
		}
		c.Panels = append(c.Panels, p)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := c.PNG(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
