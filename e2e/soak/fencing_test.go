//go:build soak

package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

const (
	fencingHolders   = 16
	fencingSandboxes = 4
	fencingWrites    = 5000
	// takeoverPercent is how often a holder takes a sandbox over (raises
	// its epoch past every other holder's) instead of writing with the
	// epoch it holds.
	takeoverPercent = 3
	// rogueEvery: every n-th write of a holder is a raw JSON patch that
	// sets its epoch WITHOUT the test clause and without the client's
	// local check, as a host with a broken client would: only the server's
	// monotonic rule stands between it and a lowering.
	rogueEvery = 8
	// maxContentionPer: at most one pkg/fence write in this many may give
	// up under contention (ErrPatchNotApplied after three attempts while
	// older holders keep moving the object).
	maxContentionPer = 100
)

// stored is one value of the holder-epoch annotation at one resourceVersion.
type stored struct {
	rv    string
	epoch string
}

// epochLog is what the watch saw, per Sandbox, in event order.
type epochLog struct {
	mu     sync.Mutex
	events map[string][]stored
	seen   map[string]map[string]string // name -> rv -> epoch
}

func (l *epochLog) add(name, rv, epoch string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events[name] = append(l.events[name], stored{rv: rv, epoch: epoch})
	if l.seen[name] == nil {
		l.seen[name] = map[string]string{}
	}
	l.seen[name][rv] = epoch
}

func (l *epochLog) has(name, rv string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.seen[name][rv]
	return e, ok
}

// watcherFor adapts a dynamic resource to the RetryWatcher, which resumes
// from the last resourceVersion when the API server closes a watch, so no
// event between two watches is lost.
type watcherFor struct {
	ri       dynamic.ResourceInterface
	selector string
}

func (w watcherFor) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return w.WatchWithContext(context.Background(), o)
}

func (w watcherFor) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	o.LabelSelector = w.selector
	return w.ri.Watch(ctx, o)
}

type fencingCounts struct {
	attempted, admitted                                atomic.Int64
	clientWrites, rogueWrites, rogueAdmitted           atomic.Int64
	staleLocal, staleLostRace, staleServer, contention atomic.Int64
	notStale, admittedWrongEpoch, takeovers            atomic.Int64
}

// Scenario 1 (issue 7): 16 holders race fenced writes on 4 Sandboxes with
// epochs raised at random takeovers; a watch records every stored value.
// The fence holds iff no stored epoch ever decreases, every admitted write is
// a stored value the watch saw, and every refusal is explained by a newer
// holder.
func TestFencingSoak(t *testing.T) {
	const sc = "1 fencing"
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	ns := env.HostNamespace
	run := "soak-" + strconv.FormatInt(time.Now().UnixNano()%1e6, 36)
	selector := "sandbox-fence-soak=" + run
	sandboxes := env.Admin.Dynamic.Resource(framework.SandboxGVR).Namespace(ns)

	list, err := sandboxes.List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, list.GetResourceVersion(), watcherFor{ri: sandboxes, selector: selector})
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Stop()
	log := &epochLog{events: map[string][]stored{}, seen: map[string]map[string]string{}}
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for ev := range rw.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			log.add(u.GetName(), u.GetResourceVersion(), u.GetAnnotations()[fence.AnnotationHolderEpoch])
		}
	}()

	host := fence.NewClient(env.Host.Dynamic, fence.Options{})
	names := make([]string, fencingSandboxes)
	next := make([]atomic.Uint64, fencingSandboxes)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", run, i)
		sbx := framework.MakeSandbox(ns, names[i]).Obj()
		sbx.SetLabels(map[string]string{"sandbox-fence-soak": run})
		if _, err := host.CreateWorkspace(ctx, sbx, fence.WriteOptions{Epoch: new(uint64(1))}); err != nil {
			t.Fatalf("create %s at epoch 1: %v", names[i], err)
		}
		next[i].Store(1)
	}
	t.Cleanup(func() {
		_ = sandboxes.DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: selector})
	})

	var c fencingCounts
	admittedWrites := &writeLog{}
	var examples sync.Map // first message of each unexpected kind
	start := time.Now()
	var wg sync.WaitGroup
	for h := range fencingHolders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(h), uint64(start.UnixNano())))
			held := make([]uint64, fencingSandboxes)
			for n := 0; ctx.Err() == nil; n++ {
				if c.attempted.Add(1) > fencingWrites {
					c.attempted.Add(-1)
					return
				}
				s := rng.IntN(fencingSandboxes)
				if held[s] == 0 || rng.IntN(100) < takeoverPercent {
					held[s] = next[s].Add(1)
					c.takeovers.Add(1)
				}
				e := held[s]
				name := names[s]
				var out *unstructured.Unstructured
				var err error
				rogue := n%rogueEvery == rogueEvery-1
				if rogue {
					c.rogueWrites.Add(1)
					body := fmt.Sprintf(`[{"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"%d"}]`, e)
					out, err = env.Host.Dynamic.Resource(framework.SandboxGVR).Namespace(ns).Patch(ctx, name, types.JSONPatchType, []byte(body), metav1.PatchOptions{})
				} else {
					c.clientWrites.Add(1)
					switch rng.IntN(3) {
					case 0:
						out, err = host.Suspend(ctx, ns, name, fence.WriteOptions{Epoch: &e})
					case 1:
						out, err = host.Resume(ctx, ns, name, fence.WriteOptions{Epoch: &e})
					default:
						out, err = host.Stamp(ctx, ns, name, fence.WriteOptions{Epoch: &e})
					}
				}
				switch {
				case err == nil:
					c.admitted.Add(1)
					if rogue {
						c.rogueAdmitted.Add(1)
					}
					got := out.GetAnnotations()[fence.AnnotationHolderEpoch]
					if got != strconv.FormatUint(e, 10) {
						c.admittedWrongEpoch.Add(1)
						examples.LoadOrStore("admitted-wrong-epoch", fmt.Sprintf("%s: sent %d, stored %q", name, e, got))
					}
					admittedWrites.record(name, out.GetResourceVersion(), got)
				case errors.Is(err, fence.ErrStaleEpoch):
					// The client read a newer epoch and sent nothing; half
					// the time the host re-acquires (a takeover next time).
					c.staleLocal.Add(1)
					if rng.IntN(2) == 0 {
						held[s] = 0
					}
				case errors.Is(err, fence.ErrPatchNotApplied):
					// A test clause failed: the stored epoch moved under
					// the write. Stale iff it moved past this holder.
					// Otherwise the client used its three attempts while
					// older holders, not fenced off yet because
					// this epoch was not stored yet, kept moving the object:
					// contention, a retryable error, not a verdict.
					if storedEpoch(ctx, ns, name) > e {
						c.staleLostRace.Add(1)
					} else {
						c.contention.Add(1)
						examples.LoadOrStore("contention", err.Error())
					}
				case isDecreaseDenial(err):
					// The monotonic rule refused a lowering on the server.
					// The denial names the epoch stored when the policy
					// ran and the one sent: right iff it is this holder's
					// epoch and the stored one is above it.
					if stored, sent, _ := framework.EpochDecreaseDenial(err); sent == e && stored > e {
						c.staleServer.Add(1)
					} else {
						c.notStale.Add(1)
						examples.LoadOrStore("denied-not-stale", fmt.Sprintf("held %d, denial names stored %d, sent %d: %v", e, stored, sent, err))
					}
					if rng.IntN(2) == 0 {
						held[s] = 0
					}
				default:
					if ctx.Err() != nil {
						c.attempted.Add(-1)
						return
					}
					c.notStale.Add(1)
					examples.LoadOrStore("other", err.Error())
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("the fencing load did not finish within its bound: %v", ctx.Err())
	}

	// The watch has seen everything once it has seen each Sandbox's
	// current resourceVersion (watch events arrive in resourceVersion order).
	for _, name := range names {
		cur, err := sandboxes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := framework.Eventually(ctx, time.Minute, 50*time.Millisecond, "watch caught up with "+name, func(context.Context) (bool, string, error) {
			_, ok := log.has(name, cur.GetResourceVersion())
			return ok, "resourceVersion " + cur.GetResourceVersion() + " not seen yet", nil
		}); err != nil {
			t.Fatal(err)
		}
	}

	var lowerings, malformed int64
	log.mu.Lock()
	for name, evs := range log.events {
		var prev uint64
		for i, ev := range evs {
			v, err := fence.ParseEpoch(ev.epoch)
			if err != nil {
				malformed++
				t.Errorf("%s: the watch saw an unreadable epoch %q at resourceVersion %s", name, ev.epoch, ev.rv)
				continue
			}
			if i > 0 && v < prev {
				lowerings++
				t.Errorf("%s: the stored epoch went down from %d to %d at resourceVersion %s", name, prev, v, ev.rv)
			}
			prev = v
		}
	}
	watched := 0
	for _, evs := range log.events {
		watched += len(evs)
	}
	log.mu.Unlock()
	var missing int64
	for _, w := range admittedWrites.all() {
		if got, ok := log.has(w.name, w.rv); !ok || got != w.epoch {
			missing++
			if missing <= 5 {
				t.Errorf("admitted write %s@%s (epoch %s) is not in the watch (saw %q, %v)", w.name, w.rv, w.epoch, got, ok)
			}
		}
	}
	examples.Range(func(k, v any) bool {
		t.Logf("example %s: %v", k, v)
		return true
	})

	refused := c.staleLocal.Load() + c.staleLostRace.Load() + c.staleServer.Load() + c.contention.Load() + c.notStale.Load()
	figures.note(sc, "holders / Sandboxes", "%d / %d", fencingHolders, fencingSandboxes)
	figures.note(sc, "fenced writes attempted", "%d (%d through pkg/fence, %d raw without test clause)", c.attempted.Load(), c.clientWrites.Load(), c.rogueWrites.Load())
	figures.note(sc, "admitted", "%d (%d of them raw)", c.admitted.Load(), c.rogueAdmitted.Load())
	figures.note(sc, "refused", "%d: %d stale before sending, %d lost a race to a newer epoch, %d stale denied by the holder-epoch VAP, %d gave up after 3 attempts under contention", refused, c.staleLocal.Load(), c.staleLostRace.Load(), c.staleServer.Load(), c.contention.Load())
	figures.note(sc, "takeovers (epoch raised)", "%d", c.takeovers.Load())
	figures.note(sc, "stored values seen by the watch", "%d", watched)
	figures.note(sc, "duration / rate", "%s / %.0f writes/s", elapsed.Round(100*time.Millisecond), float64(c.attempted.Load())/elapsed.Seconds())
	figures.count(t, sc, "lowerings observed", lowerings, true)
	figures.count(t, sc, "unreadable epochs observed", malformed, true)
	figures.count(t, sc, "admitted writes missing from the watch", missing, true)
	figures.count(t, sc, "admitted writes that stored another epoch", c.admittedWrongEpoch.Load(), true)
	figures.count(t, sc, "refusals that were not stale", c.notStale.Load(), true)
	// Contention is allowed (a host retries it), but bounded:
	// a client that gave up often would not be fencing, only failing.
	figures.atMost(t, sc, "gave up after 3 attempts under contention", c.contention.Load(), c.clientWrites.Load()/maxContentionPer)
	if c.attempted.Load() < fencingWrites {
		t.Errorf("only %d fenced writes attempted, want %d", c.attempted.Load(), fencingWrites)
	}
	if c.staleServer.Load() == 0 {
		t.Errorf("no raw stale write reached the holder-epoch policy: the server-side fence was not exercised")
	}
}

// storedEpoch reads the stored epoch as the admin (0 when unreadable).
func storedEpoch(ctx context.Context, ns, name string) uint64 {
	cur, err := env.Admin.Dynamic.Resource(framework.SandboxGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return 0
	}
	return fence.ReadHolderEpoch(cur).Epoch
}

// isDecreaseDenial is any refusal that says "may not decrease": judged by
// what the denial names (framework.EpochDecreaseDenial), so a malformed one
// counts as a refusal that was not stale.
func isDecreaseDenial(err error) bool {
	return strings.Contains(err.Error(), "may not decrease")
}

type admittedWrite struct{ name, rv, epoch string }

type writeLog struct {
	mu     sync.Mutex
	writes []admittedWrite
}

func (l *writeLog) record(name, rv, epoch string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes = append(l.writes, admittedWrite{name, rv, epoch})
}

func (l *writeLog) all() []admittedWrite {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]admittedWrite(nil), l.writes...)
}
