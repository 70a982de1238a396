package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is one control-plane component running as a child process in its
// own process group, with its output in a log file.
type Process struct {
	Name    string
	Args    []string
	LogPath string
	Pid     int

	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	err  error
}

// StartProcess starts bin with args, output appended to logPath.
//
// Attached processes (tests) get Setpgid, so a Ctrl-C on the terminal reaches
// only the test binary and our handler stops them in order, and Pdeathsig
// SIGKILL, so that nothing survives a panic, a `go test -timeout` or a
// SIGKILL of the test binary. Detached processes (devcluster up) get their
// own session instead: they must outlive the command that started them.
func StartProcess(name, bin string, args []string, logPath string, detached bool) (*Process, error) {
	return StartProcessEnv(name, bin, args, nil, logPath, detached)
}

// StartProcessEnv is StartProcess with env added to this process's
// environment (a component configured by environment variables, such as
// Kyverno's admission controller).
func StartProcessEnv(name, bin string, args, env []string, logPath string, detached bool) (*Process, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout = logf
	cmd.Stderr = logf
	if detached {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	p := &Process{Name: name, Args: args, LogPath: logPath, Pid: cmd.Process.Pid, cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return true, p.err
	default:
		return false, nil
	}
}

// Stop ends the process group: SIGTERM, then SIGKILL after grace.
// kube-apiserver can take over ten seconds on one SIGTERM (it drains), so the
// grace is bounded rather than trusted.
func (p *Process) Stop(grace time.Duration) {
	if ok, _ := p.Exited(); ok {
		return
	}
	_ = syscall.Kill(-p.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
		<-p.done
	}
	// The group may hold children of the component; none should survive it.
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
}

// Tail returns the last n lines of the process log.
func (p *Process) Tail(n int) string { return TailFile(p.LogPath, n) }

// TailFile returns the last n lines of a file, or a note when it is unreadable.
func TailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// StopPid ends a process (and its group) that this process did not start,
// such as one left by `devcluster up`. It returns once the pid is gone, or an
// error naming it when it survives SIGKILL.
func StopPid(pid int, grace time.Duration) error {
	if !Alive(pid) {
		return nil
	}
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	_ = syscall.Kill(pid, syscall.SIGTERM)
	if waitGone(pid, grace) {
		return nil
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if waitGone(pid, 5*time.Second) {
		return nil
	}
	return fmt.Errorf("process %d survived SIGKILL", pid)
}

func waitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !Alive(pid) {
			return true
		}
		time.Sleep(50 * time.Millisecond) // polling /proc: there is no wait() on a non-child
	}
	return !Alive(pid)
}

// Alive reports whether pid is a running (non-zombie) process.
func Alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return !errors.Is(err, os.ErrNotExist) && syscall.Kill(pid, 0) == nil
	}
	// Field 3 (after the parenthesised command) is the state; Z is a zombie.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return true
	}
	return b[i+2] != 'Z' && b[i+2] != 'X'
}

// Flag returns the value of --name=value on the process's command line, or
// "" (the harness passes every flag in that form).
func (p *Process) Flag(name string) string {
	for _, a := range p.Args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}
