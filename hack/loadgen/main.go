// Command loadgen measures the webhook server alone (issue 6, item 3): the
// production handler stack (controller-runtime's webhook server, TLS 1.2+,
// HTTP/1.1 as cmd/webhook configures it, the CiliumHandler over an
// in-memory owner cache) in a child process limited to one P
// (GOMAXPROCS=1), driven over loopback HTTPS with keep-alive connections by
// this process with realistic 2-4 KB AdmissionReviews.
//
// Two phases: a closed loop that saturates the server (reviews per second,
// and per second of server CPU time read from /proc), then an open loop at a
// fixed rate (default 2,500/s, half the 5,000/s-per-core target) whose
// latencies are measured from each request's scheduled send time, so a
// stall is charged to every request it delays (no coordinated omission).
//
//	go -C hack run ./loadgen [-duration 5s] [-rate 2500] [-out docs/bench]
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/sandbox-fence/sandbox-fence/e2e/cluster"
	"github.com/sandbox-fence/sandbox-fence/internal/testing/review"
	"github.com/sandbox-fence/sandbox-fence/internal/webhook"
)

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "loadgen %s: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func main() {
	serve := flag.String("serve", "", "internal: run the server with the certificates in this directory")
	duration := flag.Duration("duration", 5*time.Second, "length of each phase")
	conns := flag.Int("conns", 16, "keep-alive connections of the closed loop")
	rate := flag.Float64("rate", 2500, "requests per second of the open loop")
	serverProcs := flag.Int("server-procs", 1, "GOMAXPROCS of the server process")
	out := flag.String("out", "", "directory for loadgen-results.md (default: print only)")
	cpuprofile := flag.String("server-cpuprofile", "", "write the server's CPU profile over both phases to this file")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if *serve != "" {
		err = runServer(ctx, *serve, *cpuprofile)
	} else {
		err = run(ctx, *duration, *conns, *rate, *serverProcs, *out, *cpuprofile)
	}
	if err != nil {
		logf("FAILED: %v", err)
		os.Exit(1)
	}
}

// runServer is the child: the webhook server with the production handler
// stack; it prints its port and serves until its stdin closes (the parent
// exited) or it is signalled.
func runServer(ctx context.Context, certDir, cpuprofile string) error {
	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	srv := ctrlwebhook.NewServer(ctrlwebhook.Options{
		Host: "127.0.0.1", Port: port, CertDir: certDir,
		// As cmd/webhook: TLS 1.2+ and HTTP/1.1 only.
		TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.MinVersion = tls.VersionTLS12; c.NextProtos = []string{"http/1.1"} }},
	})
	srv.Register(webhook.CiliumEgressPath, review.Handler(nil, 0))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	errc := make(chan error, 1)
	go func() { errc <- srv.Start(ctx) }()
	// Ready when the TLS listener answers.
	for {
		if err := srv.StartedChecker()(nil); err == nil {
			break
		}
		select {
		case err := <-errc:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	fmt.Printf("ready %d\n", port)
	err = <-errc
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// serverCPU is the child's user+system CPU time.
func serverCPU(pid int) (time.Duration, error) { return cluster.CPUTime(pid) }

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// openWorkers bounds the open loop's requests in flight (and connections).
const openWorkers = 32

type result struct {
	name      string
	sent      int
	failed    int
	elapsed   time.Duration
	serverCPU time.Duration
	lat       []time.Duration
	// svc is measured from the actual send; lat from the scheduled send
	// (open loop). A gap between them is the generator's own lag.
	svc   []time.Duration
	load0 string
	load1 string
}

func (r *result) row() string {
	slices.Sort(r.lat)
	slices.Sort(r.svc)
	pct := func(v []time.Duration, q float64) string {
		if len(v) == 0 {
			return "-"
		}
		i := int(math.Ceil(q/100*float64(len(v)))) - 1
		return fmt.Sprintf("%.3f", float64(v[max(0, i)])/float64(time.Millisecond))
	}
	p := func(q float64) string { return pct(r.lat, q) }
	rps := float64(r.sent) / r.elapsed.Seconds()
	perCore := "-"
	if r.serverCPU > 0 {
		perCore = fmt.Sprintf("%.0f", float64(r.sent)/r.serverCPU.Seconds())
	}
	return fmt.Sprintf("| %s | %d | %d | %.0f | %.2f | %s | %s | %s | %s | %s | %s | %s | %s → %s |", r.name, r.sent, r.failed, rps,
		r.serverCPU.Seconds()/r.elapsed.Seconds(), perCore, p(50), p(90), p(99), p(99.9), pct(r.svc, 50), pct(r.svc, 99), r.load0, r.load1)
}

func run(ctx context.Context, duration time.Duration, conns int, rate float64, serverProcs int, out, cpuprofile string) error {
	dir, err := os.MkdirTemp("", "sandbox-fence-loadgen-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ca, err := cluster.NewCA("loadgen-ca")
	if err != nil {
		return err
	}
	serving, err := ca.Serving("sandbox-fence-webhook", []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		return err
	}
	if err := cluster.WritePair(dir, "tls", serving); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, self, "-serve", dir, "-server-cpuprofile", cpuprofile)
	cmd.Env = append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(serverProcs))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() {
		stdin.Close()
		_ = cmd.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return fmt.Errorf("server did not start: %w", err)
	}
	port, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "ready ")))
	if err != nil {
		return fmt.Errorf("server said %q", line)
	}
	url := fmt.Sprintf("https://127.0.0.1:%d%s", port, webhook.CiliumEgressPath)

	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12},
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		MaxConnsPerHost:     256,
		IdleConnTimeout:     time.Minute,
		ForceAttemptHTTP2:   false,
	}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	// 256 distinct reviews; one in twenty names an invented owner. Each
	// answer must carry its review's verdict, so a fixture the rules refuse
	// is never measured as the admitted path.
	var reviews [][]byte
	var verdicts [][]byte
	minSize, maxSize := math.MaxInt, 0
	for i := range 256 {
		k := review.Admitted
		if i%20 == 19 {
			k = review.Denied
		}
		b, err := review.Build(i, k)
		if err != nil {
			return err
		}
		reviews = append(reviews, b)
		verdicts = append(verdicts, []byte(fmt.Sprintf(`"allowed":%v`, k == review.Admitted)))
		minSize, maxSize = min(minSize, len(b)), max(maxSize, len(b))
	}
	send := func(i int) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(reviews[i%len(reviews)]))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK || !bytes.Contains(body, verdicts[i%len(verdicts)]) {
			return fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, body)
		}
		return nil
	}
	// Every review's verdict is checked once before measuring.
	for i := range reviews {
		if err := send(i); err != nil {
			return fmt.Errorf("review %d: %w", i, err)
		}
	}
	// Keep-alive is what is measured, not TLS handshakes: open every
	// connection either phase will use before measuring.
	var wg sync.WaitGroup
	errs := make(chan error, max(conns, openWorkers))
	for i := range max(conns, openWorkers) {
		wg.Go(func() { errs <- send(i) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return fmt.Errorf("warming connections: %w", err)
		}
	}
	logf("server ready on %s (GOMAXPROCS=%d); reviews %d-%d bytes; load %s", url, serverProcs, minSize, maxSize, loadavg())

	closed := &result{name: fmt.Sprintf("closed loop, %d connections", conns), load0: loadavg()}
	if err := measure(ctx, cmd.Process.Pid, closed, func(deadline time.Time, rec func(time.Duration, time.Duration, error)) {
		var wg sync.WaitGroup
		var seq atomic.Int64
		for range conns {
			wg.Go(func() {
				for time.Now().Before(deadline) && ctx.Err() == nil {
					t := time.Now()
					err := send(int(seq.Add(1)))
					rec(time.Since(t), time.Since(t), err)
				}
			})
		}
		wg.Wait()
	}, duration); err != nil {
		return err
	}
	closed.load1 = loadavg()
	logf("%s", closed.row())

	open := &result{name: fmt.Sprintf("open loop at %.0f/s", rate), load0: loadavg()}
	if err := measure(ctx, cmd.Process.Pid, open, func(deadline time.Time, rec func(time.Duration, time.Duration, error)) {
		interval := time.Duration(float64(time.Second) / rate)
		start := time.Now()
		jobs := make(chan time.Time, 4096)
		var wg sync.WaitGroup
		var seq atomic.Int64
		for range openWorkers {
			wg.Go(func() {
				for scheduled := range jobs {
					t := time.Now()
					err := send(int(seq.Add(1)))
					rec(time.Since(scheduled), time.Since(t), err)
				}
			})
		}
		timer := time.NewTimer(0)
		for i := 0; ; i++ {
			at := start.Add(time.Duration(i) * interval)
			if at.After(deadline) || ctx.Err() != nil {
				break
			}
			timer.Reset(time.Until(at))
			<-timer.C
			jobs <- at
		}
		close(jobs)
		wg.Wait()
	}, duration); err != nil {
		return err
	}
	open.load1 = loadavg()
	logf("%s", open.row())

	var md strings.Builder
	fmt.Fprintf(&md, "Webhook server alone: controller-runtime webhook server + CiliumHandler in a child process with GOMAXPROCS=%d, loopback HTTPS (TLS 1.2+, HTTP/1.1 keep-alive), %d distinct AdmissionReviews of %d-%d bytes (1 in 20 names an invented owner), %s per phase.\n\n",
		serverProcs, len(reviews), minSize, maxSize, duration)
	md.WriteString("Latency columns are from the scheduled send time; the two \"from send\" columns start the clock when the request actually left, so their gap to the others is the generator's own lag.\n\n")
	md.WriteString("| phase | reviews | failed | reviews/s | server CPU (cores) | reviews per server CPU-second | p50 ms | p90 ms | p99 ms | p99.9 ms | from send p50 ms | from send p99 ms | load before → after |\n")
	md.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	md.WriteString(closed.row() + "\n" + open.row() + "\n")
	fmt.Println(md.String())
	if out != "" {
		if err := os.MkdirAll(out, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, "loadgen-results.md"), []byte(md.String()), 0o644); err != nil {
			return err
		}
	}
	if closed.failed+open.failed > 0 {
		return errors.New("some reviews failed; see the table")
	}
	return nil
}

// measure runs drive until the deadline and records latencies, failures
// and the server's CPU time over the phase.
func measure(ctx context.Context, pid int, r *result, drive func(deadline time.Time, rec func(sched, sent time.Duration, err error)), d time.Duration) error {
	var mu sync.Mutex
	rec := func(lat, svc time.Duration, err error) {
		mu.Lock()
		defer mu.Unlock()
		r.sent++
		if err != nil {
			r.failed++
			return
		}
		r.lat = append(r.lat, lat)
		r.svc = append(r.svc, svc)
	}
	cpu0, err := serverCPU(pid)
	if err != nil {
		return err
	}
	start := time.Now()
	drive(start.Add(d), rec)
	r.elapsed = time.Since(start)
	cpu1, err := serverCPU(pid)
	if err != nil {
		return err
	}
	r.serverCPU = cpu1 - cpu0
	return ctx.Err()
}
