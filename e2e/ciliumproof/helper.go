package ciliumproof

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandbox-fence/sandbox-fence/e2e/ciliumproof/reach/protocol"
)

// reachDir is the nested module of the ciliumreach program (reach/main.go),
// relative to this package.
const reachDir = "reach"

// Reach is a running ciliumreach, asked one request at a time.
//
// Every recycleEvery requests it starts a fresh process: each request
// leaves about a megabyte behind in Cilium's package-level state, so one
// process for a whole run of 20,000 bodies grew past 15 GiB.
type Reach struct {
	bin    string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	enc    *json.Encoder
	dec    *json.Decoder
	stderr strings.Builder
	mu     sync.Mutex
	next   int
	asked  int           // requests this process answered
	cpu    time.Duration // CPU of the processes already ended
	// Flows counts the flows looked up so far.
	Flows int
}

// recycleEvery bounds the requests one process answers (Reach's comment
// says why); a start costs a few milliseconds.
const recycleEvery = 500

// BuildReach builds ciliumreach into dir, in its own module, with the go
// command and the environment (GOFLAGS, CGO_ENABLED, GOCACHE) this test
// runs under, so make's flags apply and the build cache serves a second
// build.
func BuildReach(dir string) (string, error) {
	bin := filepath.Join(dir, "ciliumreach")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = reachDir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ciliumreach: %v\n%s", err, out)
	}
	return bin, nil
}

// StartReach runs the program at bin.
func StartReach(bin string) (*Reach, error) {
	r := &Reach{bin: bin}
	return r, r.start()
}

func (r *Reach) start() error {
	r.cmd, r.asked = exec.Command(r.bin), 0
	r.stderr.Reset()
	r.cmd.Stderr = &r.stderr
	var err error
	if r.stdin, err = r.cmd.StdinPipe(); err != nil {
		return err
	}
	stdout, err := r.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := r.cmd.Start(); err != nil {
		return err
	}
	r.enc = json.NewEncoder(r.stdin)
	r.dec = json.NewDecoder(bufio.NewReaderSize(stdout, 1<<20))
	r.dec.DisallowUnknownFields()
	return nil
}

// Ask sends one request and returns its answer. An answer with Error set is
// returned as an error: the request was malformed, which is this package's
// bug, not a finding.
func (r *Reach) Ask(req protocol.Request) (protocol.Answer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ans protocol.Answer
	if r.asked == recycleEvery {
		if err := r.stop(); err != nil {
			return ans, err
		}
		if err := r.start(); err != nil {
			return ans, fmt.Errorf("ciliumreach: %w", err)
		}
	}
	r.asked++
	r.next++
	req.ID = r.next
	if err := r.enc.Encode(req); err != nil {
		return ans, fmt.Errorf("ciliumreach: %w (stderr: %s)", err, r.stderr.String())
	}
	if err := r.dec.Decode(&ans); err != nil {
		return ans, fmt.Errorf("ciliumreach: %w (stderr: %s)", err, r.stderr.String())
	}
	if ans.ID != req.ID {
		return ans, fmt.Errorf("ciliumreach: answer %d to request %d", ans.ID, req.ID)
	}
	if ans.Error != "" {
		return ans, errors.New("ciliumreach: " + ans.Error)
	}
	r.Flows += len(ans.Verdicts)
	return ans, nil
}

// CPU is the program's user and system time so far, over every process
// Reach started, where /proc tells it (0 elsewhere): the share of a run's
// CPU that Cilium's repository takes.
func (r *Reach) CPU() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cpu + processCPU(r.cmd.Process.Pid)
}

func processCPU(pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields 14 and 15 (utime, stime, in clock ticks of 1/100 s), counted
	// after the command name, which ends at the last ')'.
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.Atoi(f[11])
	stime, _ := strconv.Atoi(f[12])
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// Stop ends the program and waits for it.
func (r *Reach) Stop() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stop()
}

// stop ends the current process, its CPU added to r.cpu first (a process
// waited for has no /proc entry).
func (r *Reach) stop() error {
	r.cpu += processCPU(r.cmd.Process.Pid)
	r.stdin.Close()
	if err := r.cmd.Wait(); err != nil {
		return fmt.Errorf("ciliumreach: %w (stderr: %s)", err, r.stderr.String())
	}
	return nil
}
