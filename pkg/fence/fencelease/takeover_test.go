package fencelease_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/sandbox-fence/sandbox-fence/pkg/fence/fencelease"
)

// fastElection paces client-go's election for tests: a Lease stores whole
// seconds, so one second is the shortest a lease can last.
func fastElection(opts fencelease.TakeOverOptions) fencelease.TakeOverOptions {
	opts.LeaseNamespace, opts.LeaseName = "work", "workspaces"
	opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod = time.Second, 500*time.Millisecond, 50*time.Millisecond
	return opts
}

// lease is a Lease as an earlier holder left it.
func lease(holder string, transitions int32) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "work", Name: "workspaces"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(holder),
			LeaseDurationSeconds: ptr.To(int32(1)),
			LeaseTransitions:     ptr.To(transitions),
			AcquireTime:          &metav1.MicroTime{Time: time.Now()},
			RenewTime:            &metav1.MicroTime{Time: time.Now()},
		},
	}
}

func quiet(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), logr.Discard()), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func storedEpoch(n uint64) func(context.Context) (uint64, error) {
	return func(context.Context) (uint64, error) { return n, nil }
}

// takeOverOutcome is what one TakeOver gave: the epoch it led with, or why
// it refused to lead.
type takeOverOutcome struct {
	Epoch  uint64
	Behind *fencelease.LeaseBehindError
	Err    string
}

func TestTakeOverLeadsOnlyWithAnEpochAboveEveryEarlierHolders(t *testing.T) {
	tests := []struct {
		name   string
		lease  []runtime.Object // the Lease as found; none means it does not exist
		stored uint64
		prefix string
		want   takeOverOutcome
	}{{
		name: "the first holder of a new Lease leads with epoch 1, above an absent annotation",
		want: takeOverOutcome{Epoch: 1},
	}, {
		name:   "a take-over of a released Lease leads with the next count plus one",
		lease:  []runtime.Object{lease("", 4)},
		stored: 5,
		want:   takeOverOutcome{Epoch: 6},
	}, {
		name:   "a candidate restarted under its old identity waits the lease out and still takes a new epoch",
		lease:  []runtime.Object{lease("host-a", 4)},
		stored: 5,
		prefix: "host-a",
		want:   takeOverOutcome{Epoch: 6},
	}, {
		name:   "a deleted and recreated Lease restarts at 0 and is refused below the stored epoch",
		stored: 5,
		want:   takeOverOutcome{Behind: &fencelease.LeaseBehindError{Lease: "work/workspaces", Epoch: 1, Stored: 5}},
	}, {
		name:   "a Lease lowered by hand to give the stored epoch is refused: two holders would share it",
		lease:  []runtime.Object{lease("", 3)},
		stored: 5,
		want:   takeOverOutcome{Behind: &fencelease.LeaseBehindError{Lease: "work/workspaces", Epoch: 5, Stored: 5}},
	}, {
		name:  "a negative leaseTransitions gives no epoch",
		lease: []runtime.Object{lease("", -5)},
		want:  takeOverOutcome{Err: "lease work/workspaces: spec.leaseTransitions -4 is negative; it cannot give a holder epoch"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got takeOverOutcome
			err := fencelease.TakeOver(quiet(t), fake.NewClientset(tt.lease...).CoordinationV1(), fastElection(fencelease.TakeOverOptions{
				IdentityPrefix: tt.prefix,
				StoredEpoch:    storedEpoch(tt.stored),
				WhileLeading:   func(_ context.Context, epoch uint64) { got.Epoch = epoch },
			}))
			if !errors.As(err, &got.Behind) && err != nil {
				got.Err = err.Error()
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("TakeOver (-want +got):\n%s", diff)
			}
			if got.Behind != nil && !errors.Is(err, fencelease.ErrLeaseBehind) {
				t.Errorf("errors.Is(%v, ErrLeaseBehind) = false", err)
			}
		})
	}
}

// Two candidates: the first leads and renews while the second waits; the
// second takes over with the next epoch once the first lets go.
func TestASecondCandidateTakesOverWithTheNextEpochAfterTheFirstRenewed(t *testing.T) {
	ctx := quiet(t)
	client := fake.NewClientset()
	leases := client.CoordinationV1().Leases("work")
	var firstLeads atomic.Bool
	var renewals []time.Time
	first := fastElection(fencelease.TakeOverOptions{
		IdentityPrefix:  "host-a",
		ReleaseOnCancel: true,
		StoredEpoch:     storedEpoch(0),
		WhileLeading: func(ctx context.Context, epoch uint64) {
			firstLeads.Store(true)
			defer firstLeads.Store(false)
			if epoch != 1 {
				t.Errorf("the first holder of a new Lease leads with epoch %d, want 1", epoch)
			}
			// Lead through three renewals; each keeps the count.
			_ = wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(ctx context.Context) (bool, error) {
				l, err := leases.Get(ctx, "workspaces", metav1.GetOptions{})
				if err != nil {
					return false, nil
				}
				if r := l.Spec.RenewTime.Time; len(renewals) == 0 || !r.Equal(renewals[len(renewals)-1]) {
					renewals = append(renewals, r)
				}
				return len(renewals) > 3, nil
			})
		},
	})
	var secondEpoch uint64
	second := fastElection(fencelease.TakeOverOptions{
		IdentityPrefix: "host-b",
		StoredEpoch:    storedEpoch(1), // the first wrote its epoch
		WhileLeading: func(_ context.Context, epoch uint64) {
			if firstLeads.Load() {
				t.Error("the second candidate leads while the first still does")
			}
			secondEpoch = epoch
		},
	})
	firstDone, secondDone := make(chan error, 1), make(chan error, 1)
	go func() { firstDone <- fencelease.TakeOver(ctx, client.CoordinationV1(), first) }()
	if err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		return firstLeads.Load(), nil
	}); err != nil {
		t.Fatal("the first candidate never led:", err)
	}
	go func() { secondDone <- fencelease.TakeOver(ctx, client.CoordinationV1(), second) }()
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	if err := <-secondDone; err != nil {
		t.Fatal(err)
	}
	if len(renewals) <= 3 {
		t.Errorf("the first holder was seen renewing %d times, want more than 3", len(renewals)-1)
	}
	if secondEpoch != 2 {
		t.Errorf("the second holder leads with epoch %d, want 2: one above the first's, however often the first renewed", secondEpoch)
	}
}
