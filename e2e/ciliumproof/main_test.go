//go:build cilium

package ciliumproof

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/sandbox-fence/sandbox-fence/internal/vapeval"
)

// TestMain silences the informers' klog chatter (failures carry everything
// needed) and ends the ciliumreach process the tests shared.
func TestMain(m *testing.M) {
	vapeval.QuietKlog()
	code := m.Run()
	if err := stopReach(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// One ciliumreach for the test binary: built on first use, asked by every
// test, ended by TestMain.
var (
	reachOnce sync.Once
	reachTmp  string
	reach     *Reach
	reachErr  error
)

// reachBinaryEnv names the ciliumreach a fuzz coordinator built, for its
// workers: each is a process of its own, and building in each would spend
// the fuzz time linking.
const reachBinaryEnv = "CILIUMPROOF_REACH_BINARY"

// reachBinary builds ciliumreach, once a process, unless this process is a
// fuzz worker whose coordinator built it.
func reachBinary() (string, error) {
	if bin := os.Getenv(reachBinaryEnv); bin != "" {
		return bin, nil
	}
	var err error
	if reachTmp, err = os.MkdirTemp("", "ciliumreach"); err != nil {
		return "", err
	}
	bin, err := BuildReach(reachTmp)
	if err != nil {
		return "", err
	}
	return bin, os.Setenv(reachBinaryEnv, bin)
}

func startReach(t testing.TB) *Reach {
	t.Helper()
	r, err := sharedReach()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func sharedReach() (*Reach, error) {
	reachOnce.Do(func() {
		var bin string
		if bin, reachErr = reachBinary(); reachErr == nil {
			reach, reachErr = StartReach(bin)
		}
	})
	return reach, reachErr
}

func stopReach() error {
	var err error
	if reach != nil {
		err = reach.Stop()
	}
	if reachTmp != "" {
		os.RemoveAll(reachTmp)
	}
	return err
}
