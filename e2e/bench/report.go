package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

func diffCPU(after, before map[string]time.Duration) map[string]time.Duration {
	out := map[string]time.Duration{}
	for n, a := range after {
		out[n] = a - before[n]
	}
	return out
}

// cost is what one cell charges per admission: the write requests of its
// windows are the admissions (reads are not admitted).
type cost struct {
	ops, ratio              float64
	p50, p99                time.Duration // write requests
	addP50, addP99          time.Duration // over the none cell
	apiserver, etcd, engine float64       // CPU-seconds per 1,000 admissions
	// addServers and addCPU are over none: the apiserver's and etcd's, and
	// those plus the engine's.
	addServers, addCPU float64
	engineName         string
}

func cellCost(cells []*cellResult, base []*cellResult, c config) cost {
	s, b := summarise(cells), summarise(base)
	per1k := func(cs []*cellResult, proc string) float64 {
		var cpu time.Duration
		var writes int
		for _, c := range cs {
			cpu += c.cpu[proc]
			writes += len(c.sink.writes)
		}
		if writes == 0 {
			return 0
		}
		return cpu.Seconds() / float64(writes) * 1000
	}
	k := cost{
		ops: s.Throughput, p50: s.WriteP50, p99: s.WriteP99,
		addP50: s.WriteP50 - b.WriteP50, addP99: s.WriteP99 - b.WriteP99,
		apiserver: per1k(cells, "kube-apiserver"), etcd: per1k(cells, "etcd"), engineName: engineOf(c),
	}
	if b.Throughput > 0 {
		k.ratio = s.Throughput / b.Throughput
	}
	if k.engineName != "" {
		k.engine = per1k(cells, k.engineName)
	}
	k.addServers = k.apiserver + k.etcd - per1k(base, "kube-apiserver") - per1k(base, "etcd")
	k.addCPU = k.addServers + k.engine
	return k
}

// costReport is the peer comparison: per workload and concurrency, what
// each enforcer adds over no fence, then a verdict line per workload, then
// the engines' memory.
func costReport(wls []workload, conc []int, configs []config, results map[string][]*cellResult, key func(string, string, int) string, rss map[string]map[string]float64) string {
	var b strings.Builder
	b.WriteString("### Cost per admission: sandbox-fence against the peers\n\n")
	b.WriteString("Write latency is per write request (what admission sees); \"added\" is over the `none` cell of the same run. CPU is user+system time from /proc over the cell's windows, in CPU-seconds per 1,000 admitted writes (= CPU-ms per write); the engine is our webhook for `vaps+webhook`, the peer's process for a peer. Added CPU = the apiserver's and etcd's CPU over `none` plus the engine's. The verdicts are the paired intervals' (below), not these pooled figures.\n\n")
	for _, w := range wls {
		fmt.Fprintf(&b, "#### %s\n\n", w.Name)
		b.WriteString("| clients | config | ops/s | ×none | write p50 ms | added p50 ms | write p99 ms | added p99 ms | apiserver CPU-s/1k | etcd CPU-s/1k | engine | engine CPU-s/1k | added CPU-s/1k |\n")
		b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|\n")
		for _, n := range conc {
			base := results[key("none", w.Name, n)]
			for _, c := range configs {
				k := cellCost(results[key(c.Name, w.Name, n)], base, c)
				eng, engCPU := "-", "-"
				if k.engineName != "" {
					eng, engCPU = k.engineName, fmt.Sprintf("%.3f", k.engine)
				}
				fmt.Fprintf(&b, "| %d | %s | %.0f | %.2f | %s | %s | %s | %s | %.3f | %.3f | %s | %s | %+.3f |\n",
					n, c.Name, k.ops, k.ratio, ms(k.p50), deltaMs(k.p50, k.p50-k.addP50), ms(k.p99), deltaMs(k.p99, k.p99-k.addP99),
					k.apiserver, k.etcd, eng, engCPU, k.addCPU)
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("Resident memory of each engine process, the largest reading at the end of any block of its own configuration (MiB):\n\n| config | process | RSS MiB |\n|---|---|---:|\n")
	for _, c := range configs {
		procs := []string{"kube-apiserver"}
		if e := engineOf(c); e != "" {
			procs = append(procs, e)
		}
		for _, p := range procs {
			fmt.Fprintf(&b, "| %s | %s | %.0f |\n", c.Name, p, rss[c.Name][p])
		}
	}
	b.WriteString("\n")
	return b.String()
}

// profileCPU, after the measured rounds, installs each configuration in
// turn and takes a CPU profile of the apiserver, and of the webhook where it
// runs (from webhookPprof, its --pprof-bind-address), while the cnp
// workload runs at 1 client: where each process's time goes per
// configuration (BENCHMARKS.md, "where the CNP time goes").
func profileCPU(ctx context.Context, o options, env *framework.Env, sw *switcher, hc *hostClients, wls []workload, configs []config, webhookPprof string) ([]string, error) {
	var cnp workload
	for _, w := range wls {
		if w.Name == "cnp" {
			cnp = w
		}
	}
	if err := os.MkdirAll(o.profileDir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	for _, c := range configs {
		if _, err := sw.install(ctx, c); err != nil {
			return nil, err
		}
		secs := max(1, int(o.profileFor.Seconds()))
		profiles := map[string]func(ctx context.Context) (io.ReadCloser, error){
			"apiserver": func(ctx context.Context) (io.ReadCloser, error) {
				return env.Admin.Kube.Discovery().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", fmt.Sprint(secs)).Stream(ctx)
			},
		}
		if c.Webhook && webhookPprof != "" {
			profiles["webhook"] = func(ctx context.Context) (io.ReadCloser, error) {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", webhookPprof, secs), nil)
				if err != nil {
					return nil, err
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return nil, err
				}
				if resp.StatusCode != http.StatusOK {
					resp.Body.Close()
					return nil, fmt.Errorf("%s: %s", req.URL, resp.Status)
				}
				return resp.Body, nil
			}
		}
		errc := make(chan error, len(profiles))
		var paths []string
		for proc, open := range profiles {
			path := filepath.Join(o.profileDir, proc+"-"+strings.ReplaceAll(c.Name, "+", "-")+"-cnp-1.pprof")
			paths = append(paths, path)
			go func() { errc <- saveProfile(ctx, path, open) }()
		}
		s, _ := runWindow(ctx, hc, cnp, 1, time.Duration(secs)*time.Second+500*time.Millisecond)
		for range profiles {
			if err := <-errc; err != nil {
				return nil, fmt.Errorf("profile for %s: %w", c.Name, err)
			}
		}
		if s.errs > 0 {
			return nil, fmt.Errorf("profiling %s: %d operations failed: %w", c.Name, s.errs, s.firstErr)
		}
		for _, path := range paths {
			logf("CPU profile for %s: %s (%d operations)", c.Name, path, len(s.ops))
			files = append(files, filepath.Base(path))
		}
	}
	slices.Sort(files)
	return files, nil
}

// saveProfile writes the profile open streams to path.
func saveProfile(ctx context.Context, path string, open func(context.Context) (io.ReadCloser, error)) error {
	rc, err := open(ctx)
	if err != nil {
		return err
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, rc)
	return joinClose(err, f)
}

func joinClose(err error, f *os.File) error {
	if cerr := f.Close(); err == nil {
		return cerr
	}
	return err
}
