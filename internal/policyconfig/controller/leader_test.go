package controller

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// lease is a resourcelock.Interface held in memory; while down, every call
// fails as calls to an API server that is restarting do.
type lease struct {
	mu     sync.Mutex
	down   bool
	record *resourcelock.LeaderElectionRecord
}

var errDown = errors.New("connection refused")

func (l *lease) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		return nil, nil, errDown
	}
	if l.record == nil {
		return nil, nil, apierrors.NewNotFound(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "sandbox-fence-render")
	}
	r := *l.record
	raw, _ := json.Marshal(r)
	return &r, raw, nil
}

func (l *lease) Create(_ context.Context, r resourcelock.LeaderElectionRecord) error {
	return l.Update(context.Background(), r)
}

func (l *lease) Update(_ context.Context, r resourcelock.LeaderElectionRecord) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		return errDown
	}
	l.record = &r
	return nil
}

func (l *lease) setDown(down bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = down
}

func (*lease) RecordEvent(string) {}
func (*lease) Identity() string   { return "replica-a" }
func (*lease) Describe() string   { return "test/sandbox-fence-render" }

// A replica whose Lease could not be renewed (the API server down for
// longer than the renew deadline) ends its term and campaigns again; Start
// does not return, so the process, which serves admission, keeps running.
// With controller-runtime's leader election, the same loss ended the
// process.
func TestALostLeaseEndsTheTermNotTheReplica(t *testing.T) {
	lock := &lease{}
	terms := make(chan int, 4)
	var running sync.Mutex
	n := 0
	l := &Leader{Lock: lock, LeaseDuration: 400 * time.Millisecond, RenewDeadline: 300 * time.Millisecond, RetryPeriod: 50 * time.Millisecond,
		Run: func(ctx context.Context) error {
			if !running.TryLock() {
				t.Error("a term started while the last one was still running")
				return nil
			}
			defer running.Unlock()
			n++
			terms <- n
			<-ctx.Done()
			return nil
		}}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- l.Start(ctx) }()

	waitTerm := func(want int) {
		t.Helper()
		select {
		case got := <-terms:
			if got != want {
				t.Fatalf("term %d started, want %d", got, want)
			}
		case err := <-stopped:
			t.Fatalf("Start returned (%v) while waiting for term %d", err, want)
		case <-time.After(10 * time.Second):
			t.Fatalf("term %d never started", want)
		}
	}
	waitTerm(1)
	lock.setDown(true)
	select {
	case err := <-stopped:
		t.Fatalf("Start returned when the Lease was lost: %v", err)
	case <-time.After(time.Second): // three renew deadlines
	}
	lock.setDown(false)
	waitTerm(2)

	cancel()
	select {
	case err := <-stopped:
		if err != nil {
			t.Errorf("Start: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return after its context was done")
	}
	if !running.TryLock() {
		t.Error("Start returned while a term was still running")
	}
}
