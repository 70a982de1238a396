//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// stored is one state of the Sandbox as the watch delivered it.
type stored struct {
	rv    string
	epoch uint64
}

// landed is one write the server admitted: the epoch it carried and the
// resourceVersion of the object it returned.
type landed struct {
	holder int
	op     string
	epoch  uint64
	rv     string
}

// The fencing race the epoch exists for, on the real API server: eight
// holders with distinct epochs hammer one Sandbox with fenced writes through
// pkg/fence's Client. A holder that finds a higher epoch stored takes over
// with a fresh epoch above every epoch handed out so far (as a new process
// acquiring the workspace would). A watch records every stored state; in
// its resourceVersion order the epoch never goes down, and every admitted
// write carried an epoch at least the highest stored before it (contract §3,
// 3.6 rule 4) — so no write from a fenced-off holder ever landed.
func TestEightHoldersRacingOnOneSandboxNeverLowerTheEpoch(t *testing.T) {
	requirePolicy(t, framework.PolicyHolderEpoch)
	const holders, writesPerHolder = 8, 50
	ctx := testContext(t)
	sbx := sandboxWithEpoch(t, "1")
	ns, n := sbx.GetNamespace(), sbx.GetName()

	w, err := env.Admin.Dynamic.Resource(framework.SandboxGVR).Namespace(ns).Watch(ctx, metav1.ListOptions{
		FieldSelector:   "metadata.name=" + n,
		ResourceVersion: sbx.GetResourceVersion(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var (
		logMu    sync.Mutex
		states   = []stored{{rv: sbx.GetResourceVersion(), epoch: 1}}
		watchErr error
	)
	watchDone := make(chan struct{})
	var stopping atomic.Bool // what the watch delivers once stopped is not evidence
	go func() {
		defer close(watchDone)
		for ev := range w.ResultChan() {
			if stopping.Load() {
				continue
			}
			if ev.Type != watch.Modified {
				logMu.Lock()
				watchErr = fmt.Errorf("unexpected watch event %s: %v", ev.Type, ev.Object)
				logMu.Unlock()
				continue
			}
			obj := ev.Object.(*unstructured.Unstructured)
			e, perr := fence.ParseEpoch(obj.GetAnnotations()[fence.AnnotationHolderEpoch])
			logMu.Lock()
			if perr != nil {
				watchErr = fmt.Errorf("stored epoch at rv %s: %w", obj.GetResourceVersion(), perr)
			}
			states = append(states, stored{rv: obj.GetResourceVersion(), epoch: e})
			logMu.Unlock()
		}
	}()

	var (
		next       atomic.Uint64 // the highest epoch handed out
		takeovers  atomic.Int64
		exhausted  atomic.Int64 // ErrPatchNotApplied: the object moved three times in a row
		serverLost atomic.Int64 // PATCHes the server refused with 422 (a failed test clause)
		mu         sync.Mutex
		admitted   []landed
		wg         sync.WaitGroup
	)
	next.Store(holders)
	clients := make([]*fence.Client, holders)
	for h := range clients {
		clients[h] = countingClient(t, env.Host, &serverLost)
	}
	for h, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			epoch := uint64(h + 1) // distinct: 1..8, later ones from next
			for k := range writesPerHolder {
				var (
					out *unstructured.Unstructured
					err error
					op  string
				)
				switch (h + k) % 3 {
				case 0:
					op = "suspend"
					out, err = c.Suspend(ctx, ns, n, ptr(epoch))
				case 1:
					op = "resume"
					out, err = c.Resume(ctx, ns, n, ptr(epoch))
				default:
					op = "stamp"
					out, err = c.Stamp(ctx, ns, n, epoch)
				}
				switch {
				case err == nil:
					mu.Lock()
					admitted = append(admitted, landed{holder: h, op: op, epoch: epoch, rv: out.GetResourceVersion()})
					mu.Unlock()
					if got := out.GetAnnotations()[fence.AnnotationHolderEpoch]; got != fence.FormatEpoch(epoch) {
						t.Errorf("holder %d %s at epoch %d returned stored epoch %q", h, op, epoch, got)
					}
				case errors.Is(err, fence.ErrStaleEpoch):
					// Another holder took the workspace: take it back with
					// an epoch no one holds yet.
					takeovers.Add(1)
					epoch = next.Add(1)
				case errors.Is(err, fence.ErrPatchNotApplied):
					exhausted.Add(1)
				default:
					t.Errorf("holder %d %s at epoch %d: unexpected error %v", h, op, epoch, err)
					return
				}
			}
		}()
	}
	start := time.Now()
	wg.Wait()
	elapsed := time.Since(start)

	// Let the watch catch up with the last stored state before judging it.
	final := get(t, framework.SandboxGVR, ns, n)
	err = framework.Eventually(ctx, time.Minute, 50*time.Millisecond, "watch reaches the final resourceVersion", func(context.Context) (bool, string, error) {
		logMu.Lock()
		defer logMu.Unlock()
		last := states[len(states)-1].rv
		return last == final.GetResourceVersion(), "watch at " + last, nil
	})
	stopping.Store(true)
	w.Stop()
	<-watchDone
	if err != nil {
		t.Fatal(err)
	}
	if watchErr != nil {
		t.Fatal(watchErr)
	}

	t.Logf("%d writes by %d holders in %s: %d admitted, %d takeovers, %d PATCHes lost on the server (422), %d gave up after 3 attempts; %d stored states, final epoch %d",
		holders*writesPerHolder, holders, elapsed.Round(time.Millisecond), len(admitted), takeovers.Load(), serverLost.Load(), exhausted.Load(), len(states), states[len(states)-1].epoch)
	// Without server-side losses every stale write was refused locally by
	// the gate read and the server's side of the rule went untested.
	if len(admitted) == 0 || takeovers.Load() == 0 || serverLost.Load() == 0 {
		t.Fatalf("the race was not exercised: %d admitted, %d takeovers, %d lost on the server", len(admitted), takeovers.Load(), serverLost.Load())
	}

	index := map[string]int{}
	for i, s := range states {
		if i > 0 && s.epoch < states[i-1].epoch {
			t.Errorf("stored epoch went down at rv %s: %d after %d (rv %s)", s.rv, s.epoch, states[i-1].epoch, states[i-1].rv)
		}
		index[s.rv] = i
	}
	var highest uint64
	for _, a := range admitted {
		highest = max(highest, a.epoch)
		i, ok := index[a.rv]
		if !ok {
			t.Errorf("holder %d %s at epoch %d returned rv %s, which the watch never delivered", a.holder, a.op, a.epoch, a.rv)
			continue
		}
		if states[i].epoch != a.epoch {
			t.Errorf("holder %d %s at epoch %d: the watch saw epoch %d at its rv %s", a.holder, a.op, a.epoch, states[i].epoch, a.rv)
		}
		var before uint64
		for _, s := range states[:i] {
			before = max(before, s.epoch)
		}
		if a.epoch < before {
			t.Errorf("holder %d %s at epoch %d landed at rv %s after epoch %d was stored: a fenced-off holder wrote", a.holder, a.op, a.epoch, a.rv, before)
		}
	}
	if got := states[len(states)-1].epoch; got != highest {
		t.Errorf("final stored epoch %d, want the highest admitted epoch %d", got, highest)
	}
}

// countingClient is a fence.Client acting as id that counts the PATCHes the
// server refused with 422: the races lost on the server rather than refused
// locally by the gate read.
func countingClient(t *testing.T, id *framework.Identity, lost *atomic.Int64) *fence.Client {
	t.Helper()
	cfg := rest.CopyConfig(id.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil && r.Method == http.MethodPatch && resp.StatusCode == http.StatusUnprocessableEntity {
				lost.Add(1)
			}
			return resp, err
		})
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return fence.NewClient(dyn, fence.Options{})
}
