// Command devcluster runs the local control plane with sandbox-fence
// installed, for trying the fence by hand:
//
//	devcluster up     start in the background; writes .dev/kubeconfig
//	devcluster down   stop what up started and check nothing is left
//	devcluster run    start, print commands to try, stop on Ctrl-C
//
// The kubeconfig has one context per production identity: admin, host,
// other-host, operator and break-glass.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sandbox-fence/sandbox-fence/e2e/cluster"
	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/e2e/provider"
)

const usage = `usage: devcluster up|down|run

  up    start the local control plane with the bundle in the background;
        writes .dev/kubeconfig (contexts admin, host, other-host, operator,
        break-glass); state, logs and pids under .dev/
  down  stop everything up started; fails if a process is left
  run   like up, in the foreground: prints commands to try, stops on Ctrl-C
`

// pidFile records what `up` started, for `down`.
type pidFile struct {
	Processes []pidEntry `json:"processes"`
}

type pidEntry struct {
	Name string `json:"name"`
	Pid  int    `json:"pid"`
	Log  string `json:"log"`
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "devcluster %s: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	root, err := framework.RepoRoot()
	if err != nil {
		fail(err)
	}
	bin, version, err := framework.ControlPlane(root)
	if err != nil {
		fail(err)
	}
	d := dev{root: root, dir: filepath.Join(root, ".dev"), bin: bin, version: version}
	switch os.Args[1] {
	case "up":
		err = d.up()
	case "down":
		err = d.down()
	case "run":
		err = d.run()
	default:
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "devcluster: %v\n", err)
	os.Exit(1)
}

type dev struct{ root, dir, bin, version string }

func (d dev) kubeconfig() string { return filepath.Join(d.dir, "kubeconfig") }
func (d dev) pidPath() string    { return filepath.Join(d.dir, "pids.json") }
func (d dev) stateDir() string   { return filepath.Join(d.dir, "state") }

func (d dev) readPids() (*pidFile, error) {
	b, err := os.ReadFile(d.pidPath())
	if err != nil {
		return nil, err
	}
	var pf pidFile
	if err := json.Unmarshal(b, &pf); err != nil {
		return nil, fmt.Errorf("%s: %w", d.pidPath(), err)
	}
	return &pf, nil
}

// start brings up a fresh control plane in .dev/state.
func (d dev) start(ctx context.Context, detached bool) (*provider.Local, *framework.Env, error) {
	if pf, err := d.readPids(); err == nil {
		for _, p := range pf.Processes {
			if cluster.Alive(p.Pid) {
				return nil, nil, fmt.Errorf("a dev cluster is already running (%s pid %d): run `make dev-down` first", p.Name, p.Pid)
			}
		}
	}
	if err := os.RemoveAll(d.stateDir()); err != nil {
		return nil, nil, err
	}
	l := &provider.Local{RepoRoot: d.root, BinDir: d.bin, KubernetesVersion: d.version, StateDir: d.stateDir(), Detached: detached, NoSignalHandler: true, Logf: logf}
	env, err := l.Setup(ctx)
	if l.CP != nil {
		if werr := d.writePids(l.CP); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		if l.CP != nil {
			fmt.Fprint(os.Stderr, l.CP.DumpLogs(filepath.Join(d.stateDir(), "logs"), 20))
			l.CP.Stop()
			_ = os.Remove(d.pidPath())
		}
		return nil, nil, err
	}
	if err := cluster.WriteKubeconfig(d.kubeconfig(), env.Configs(), framework.ContextAdmin); err != nil {
		l.CP.Stop()
		return nil, nil, err
	}
	return l, env, nil
}

func (d dev) writePids(cp *cluster.ControlPlane) error {
	var pf pidFile
	for _, p := range cp.Processes() {
		pf.Processes = append(pf.Processes, pidEntry{Name: p.Name, Pid: p.Pid, Log: p.LogPath})
	}
	b, err := json.MarshalIndent(pf, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(d.pidPath(), b, 0o644)
}

func (d dev) up() error {
	start := time.Now()
	l, _, err := d.start(context.Background(), true)
	if err != nil {
		return err
	}
	rel, _ := filepath.Rel(d.root, d.kubeconfig())
	fmt.Printf("dev cluster up in %s: %s\n", time.Since(start).Round(100*time.Millisecond), l.CP.APIServerURL)
	fmt.Printf("  kubeconfig: %s (contexts admin, host, other-host, operator, break-glass)\n", rel)
	fmt.Printf("  logs:       %s\n", l.CP.LogDir())
	fmt.Printf("  try:        bin/kubectl --kubeconfig %s --context host -n %s get sandboxes\n", rel, framework.HostNamespace)
	fmt.Printf("  stop:       make dev-down\n")
	return nil
}

func (d dev) down() error {
	pf, err := d.readPids()
	if errors.Is(err, os.ErrNotExist) {
		fmt.Println("no dev cluster recorded in .dev/pids.json: nothing to stop")
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for i := len(pf.Processes) - 1; i >= 0; i-- {
		p := pf.Processes[i]
		if err := cluster.StopPid(p.Pid, 10*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.Name, err))
		}
	}
	var left []string
	for _, p := range pf.Processes {
		if cluster.Alive(p.Pid) {
			left = append(left, fmt.Sprintf("%s (pid %d)", p.Name, p.Pid))
		}
	}
	if len(left) > 0 {
		errs = append(errs, fmt.Errorf("still running after stop: %v", left))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	_ = os.Remove(d.pidPath())
	_ = os.Remove(d.kubeconfig())
	fmt.Printf("dev cluster stopped: %d processes ended, none left (logs kept in %s)\n", len(pf.Processes), filepath.Join(d.stateDir(), "logs"))
	return nil
}

func (d dev) run() error {
	ctx := context.Background()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	l, env, err := d.start(ctx, false)
	if err != nil {
		return err
	}
	defer func() {
		l.CP.Stop()
		_ = os.Remove(d.pidPath())
		_ = os.Remove(d.kubeconfig())
		fmt.Println("stopped; nothing left running")
	}()
	cmds, err := prepareTryIt(ctx, d, env)
	if err != nil {
		return err
	}
	fmt.Printf("\nsandbox-fence is running on %s. Try, as the host:\n\n", l.CP.APIServerURL)
	for _, c := range cmds {
		fmt.Printf("  # %s\n  %s\n\n", c.what, c.cmd)
	}
	fmt.Println("Press Ctrl-C to stop.")
	select {
	case s := <-sig:
		fmt.Printf("\n%v: stopping\n", s)
	case <-exited(l.CP):
		return fmt.Errorf("a component exited: %v", l.CP.Failed())
	}
	return nil
}

// exited closes when any component exits on its own.
func exited(cp *cluster.ControlPlane) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for range t.C {
			if cp.Failed() != nil {
				close(ch)
				return
			}
		}
	}()
	return ch
}
