//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

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

const (
	raceHolders         = 8
	raceWritesPerHolder = 50
	// raceRawEvery: every n-th write of a holder is a raw JSON patch that
	// sets its epoch with no test clause and no gate read, as a host with a
	// broken client would. pkg/fence's own writes are safe without the
	// server (their test clause fails against a moved epoch); only these
	// raw writes make the race reach the policy.
	raceRawEvery = 4
)

// raceResult is what one race saw, and every way it broke the fence.
type raceResult struct {
	admitted, rawWrites, rawAdmitted int
	takeovers, gaveUp                int64
	// policyDenials are the holder-epoch policy's own "may not decrease"
	// denials, each naming a stored epoch above the one sent.
	policyDenials int64
	states        int
	finalEpoch    uint64
	elapsed       time.Duration
	// violations are the broken invariants; empty when the fence held.
	violations []string
}

func (r raceResult) String() string {
	return fmt.Sprintf("%d writes by %d holders in %s: %d admitted (%d of %d raw), %d takeovers, %d denied by the holder-epoch policy (may not decrease), %d gave up after 3 attempts; %d stored states, final epoch %d",
		raceHolders*raceWritesPerHolder, raceHolders, r.elapsed.Round(time.Millisecond), r.admitted, r.rawAdmitted, r.rawWrites,
		r.takeovers, r.policyDenials, r.gaveUp, r.states, r.finalEpoch)
}

// The fencing race the epoch exists for, on the real API server: eight
// holders with distinct epochs hammer one Sandbox, mostly through pkg/fence's
// Client and every fourth write raw, without a test clause. A holder that
// finds a higher epoch stored takes over with a fresh epoch above every epoch
// handed out so far (as a new process acquiring the workspace would). A watch
// records every stored state; in its resourceVersion order the epoch never
// goes down, every admitted write carried an epoch at least the highest
// stored before it, and the holder-epoch policy
// itself refused stale raw writes, naming a stored epoch above the one sent.
func TestEightHoldersRacingOnOneSandboxNeverLowerTheEpoch(t *testing.T) {
	requirePolicy(t, framework.PolicyHolderEpoch)
	r := race(testContext(t), t)
	t.Log(r)
	for _, v := range r.violations {
		t.Error(v)
	}
}

// The check above fails without the rule it names: with the holder-epoch
// binding removed, the same race lowers the stored epoch and no policy
// denies anything, and the check reports both. (Before the raw writes were
// added, the race passed without the binding: pkg/fence's test clauses kept
// it safe on their own.)
func TestTheRaceCheckFailsWithTheHolderEpochBindingRemoved(t *testing.T) {
	requirePolicy(t, framework.PolicyHolderEpoch)
	ctx := testContext(t)
	var r raceResult
	if err := env.WithoutHolderEpochBinding(ctx, func() error { r = race(ctx, t); return nil }); err != nil {
		t.Fatal(err)
	}
	t.Log(r)
	var lowered, undenied bool
	for i, v := range r.violations {
		if i < 5 {
			t.Logf("caught: %s", v)
		}
		lowered = lowered || strings.Contains(v, "stored epoch went down")
		undenied = undenied || strings.Contains(v, "no stale raw write was denied by")
	}
	if !lowered || !undenied {
		t.Errorf("without the binding the race check must report a lowered epoch (%v) and no policy denial (%v); it reported %d violations", lowered, undenied, len(r.violations))
	}
}

// race runs the race on a fresh Sandbox and judges it.
func race(ctx context.Context, t *testing.T) raceResult {
	t.Helper()
	sbx := sandboxWithEpoch(t, "1")
	ns, n := sbx.GetNamespace(), sbx.GetName()
	var r raceResult
	fail := func(format string, args ...any) { r.violations = append(r.violations, fmt.Sprintf(format, args...)) }

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
		next          atomic.Uint64 // the highest epoch handed out
		takeovers     atomic.Int64
		exhausted     atomic.Int64 // ErrPatchNotApplied: the object moved three times in a row
		policyDenials atomic.Int64
		mu            sync.Mutex
		admitted      []landed
		rawWrites     int
		rawAdmitted   int
		wg            sync.WaitGroup
	)
	next.Store(raceHolders)
	c := fence.NewClient(env.Host.Dynamic, fence.Options{})
	sandboxes := env.Host.Dynamic.Resource(framework.SandboxGVR).Namespace(ns)
	start := time.Now()
	for h := range raceHolders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			epoch := uint64(h + 1) // distinct: 1..8, later ones from next
			for k := range raceWritesPerHolder {
				var (
					out *unstructured.Unstructured
					err error
					op  string
				)
				raw := k%raceRawEvery == raceRawEvery-1
				switch {
				case raw:
					op = "raw"
					body := fmt.Sprintf(`[{"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"%d"}]`, epoch)
					out, err = sandboxes.Patch(ctx, n, types.JSONPatchType, []byte(body), metav1.PatchOptions{})
				case (h+k)%3 == 0:
					op = "suspend"
					out, err = c.Suspend(ctx, ns, n, fence.WriteOptions{Epoch: new(epoch)})
				case (h+k)%3 == 1:
					op = "resume"
					out, err = c.Resume(ctx, ns, n, fence.WriteOptions{Epoch: new(epoch)})
				default:
					op = "stamp"
					out, err = c.Stamp(ctx, ns, n, fence.WriteOptions{Epoch: &epoch})
				}
				mu.Lock()
				if raw {
					rawWrites++
					if err == nil {
						rawAdmitted++
					}
				}
				mu.Unlock()
				storedAt, sent, denied := framework.EpochDecreaseDenial(err)
				switch {
				case err == nil:
					mu.Lock()
					admitted = append(admitted, landed{holder: h, op: op, epoch: epoch, rv: out.GetResourceVersion()})
					mu.Unlock()
					if got := out.GetAnnotations()[fence.AnnotationHolderEpoch]; got != fence.FormatEpoch(epoch) {
						mu.Lock()
						fail("holder %d %s at epoch %d returned stored epoch %q", h, op, epoch, got)
						mu.Unlock()
					}
				case denied:
					// The policy compared what was stored at admission with
					// what this write sent: a denial is right only when
					// it names this holder's epoch and a higher stored one.
					if sent != epoch || storedAt <= epoch {
						mu.Lock()
						fail("holder %d %s at epoch %d denied as a decrease from %d to %d", h, op, epoch, storedAt, sent)
						mu.Unlock()
					}
					policyDenials.Add(1)
					takeovers.Add(1)
					epoch = next.Add(1)
				case errors.Is(err, fence.ErrStaleEpoch):
					// Another holder took the workspace: take it back with
					// an epoch no one holds yet.
					takeovers.Add(1)
					epoch = next.Add(1)
				case errors.Is(err, fence.ErrPatchNotApplied) && !raw:
					exhausted.Add(1)
				default:
					mu.Lock()
					fail("holder %d %s at epoch %d: unexpected error %v", h, op, epoch, framework.VerdictOf(err))
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	r.elapsed = time.Since(start)

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

	r.admitted, r.rawWrites, r.rawAdmitted = len(admitted), rawWrites, rawAdmitted
	r.takeovers, r.gaveUp, r.policyDenials = takeovers.Load(), exhausted.Load(), policyDenials.Load()
	r.states, r.finalEpoch = len(states), states[len(states)-1].epoch
	if r.admitted == 0 || r.takeovers == 0 {
		fail("the race was not exercised: %d admitted, %d takeovers", r.admitted, r.takeovers)
	}
	// Without the policy's own denials the server's side of the rule went
	// untested: pkg/fence's test clauses alone would have passed.
	if r.policyDenials == 0 {
		fail("no stale raw write was denied by %s with \"may not decrease\" (%d raw writes, %d admitted): the race never reached the policy", framework.PolicyHolderEpoch, r.rawWrites, r.rawAdmitted)
	}

	index := map[string]int{}
	for i, s := range states {
		if i > 0 && s.epoch < states[i-1].epoch {
			fail("stored epoch went down at rv %s: %d after %d (rv %s)", s.rv, s.epoch, states[i-1].epoch, states[i-1].rv)
		}
		index[s.rv] = i
	}
	var highest uint64
	for _, a := range admitted {
		highest = max(highest, a.epoch)
		i, ok := index[a.rv]
		if !ok {
			fail("holder %d %s at epoch %d returned rv %s, which the watch never delivered", a.holder, a.op, a.epoch, a.rv)
			continue
		}
		if states[i].epoch != a.epoch {
			fail("holder %d %s at epoch %d: the watch saw epoch %d at its rv %s", a.holder, a.op, a.epoch, states[i].epoch, a.rv)
		}
		var before uint64
		for _, s := range states[:i] {
			before = max(before, s.epoch)
		}
		if a.epoch < before {
			fail("holder %d %s at epoch %d landed at rv %s after epoch %d was stored: a fenced-off holder wrote", a.holder, a.op, a.epoch, a.rv, before)
		}
	}
	if r.finalEpoch != highest {
		fail("final stored epoch %d, want the highest admitted epoch %d", r.finalEpoch, highest)
	}
	return r
}
