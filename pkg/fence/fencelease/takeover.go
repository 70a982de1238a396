// Package fencelease gives a host its holder epoch from a
// coordination.k8s.io/v1 Lease, through client-go's leader election.
//
// TakeOver campaigns for a Lease that guards a set of workspaces and runs
// TakeOverOptions.WhileLeading with spec.leaseTransitions+1 of its own
// acquisition: the epoch to pass to every fence.Client write while leading.
// client-go raises that count on every change of holder and keeps it on
// renewals, releases and re-acquisitions by the same identity, so it rises
// with every take-over only while the Lease is never deleted (a new Lease
// counts from 0 again), never lowered by hand, and every candidate is a new
// identity. TakeOver makes each call a new identity and refuses to lead
// (ErrLeaseBehind) with an epoch at or below the one
// TakeOverOptions.StoredEpoch reads from the workspaces; an epoch held but
// never written by a holder of a deleted Lease is out of its sight. Contract
// §3.7 has client-go's rules line by line, and the tests of this package
// that fail when one stops holding.
//
// It is a package of its own because client-go's leader election brings
// client-go's typed clientset and informers into the build, which the rest
// of pkg/fence (a dynamic client) does not need.
package fencelease

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// ErrLeaseBehind: the epoch a Lease gives is not above the epoch already
// stored on the workspaces it guards. Matched by *LeaseBehindError.
var ErrLeaseBehind = errors.New("lease behind the stored holder epoch")

// LeaseBehindError says a take-over was refused because the Lease's count
// went back: the Lease was deleted and recreated (a new Lease starts at 0)
// or an admin lowered spec.leaseTransitions. Leading with that epoch could
// share it with a holder that wrote before.
type LeaseBehindError struct {
	// Lease is namespace/name.
	Lease string
	// Epoch is the epoch the acquisition gave; Stored the epoch StoredEpoch read.
	Epoch  uint64
	Stored uint64
}

// Error names the Lease and the repair.
func (e *LeaseBehindError) Error() string {
	return fmt.Sprintf("lease %s gives holder epoch %d, not above the stored epoch %d: the Lease was deleted and recreated "+
		"(its leaseTransitions restart at 0) or its leaseTransitions were lowered; an admin raises spec.leaseTransitions "+
		"to at least %d, then a host takes over again", e.Lease, e.Epoch, e.Stored, e.Stored)
}

// Is makes errors.Is(err, ErrLeaseBehind) true.
func (e *LeaseBehindError) Is(target error) bool { return target == ErrLeaseBehind }

// epochOfTransitions is the holder epoch of the candidate whose acquisition
// wrote transitions: the count plus one. The one keeps the first holder of a
// new Lease above the 0 an absent annotation reads as, so the epoch is above
// every epoch an earlier holder of the same Lease held. The count is an
// int32 on the Lease, so the epoch is at most 2^31, far below
// fence.MaxEpoch. A negative count, which the API server does not store,
// gives none.
func epochOfTransitions(lease string, transitions int) (uint64, error) {
	if transitions < 0 {
		return 0, fmt.Errorf("lease %s: spec.leaseTransitions %d is negative; it cannot give a holder epoch", lease, transitions)
	}
	return uint64(transitions) + 1, nil
}

// TakeOverOptions configure TakeOver.
type TakeOverOptions struct {
	// LeaseNamespace and LeaseName name the coordination.k8s.io/v1 Lease
	// whose holder alone writes the workspaces it guards. Required.
	LeaseNamespace string
	LeaseName      string
	// IdentityPrefix starts this candidate's spec.holderIdentity; "" means
	// the host name. TakeOver appends a random suffix, so every call is a
	// new holder: client-go keeps spec.leaseTransitions when an identity
	// re-acquires a Lease it held, so a process restarted under its old
	// identity would otherwise lead with its predecessor's epoch.
	IdentityPrefix string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's
	// (leaderelection.LeaderElectionConfig); zero means 15 s, 10 s and 2 s.
	// The Lease stores whole seconds of LeaseDuration.
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// ReleaseOnCancel gives the Lease up when the lead ends, so the next
	// candidate need not wait out LeaseDuration. client-go warns that
	// work guarded by the Lease must have stopped first; with the fence, a
	// late write of the old holder carries a lower epoch than the new
	// holder's, and is refused once the new holder has written.
	ReleaseOnCancel bool
	// StoredEpoch returns the highest holder epoch stored on the workspaces
	// the Lease guards (fence.ReadHolderEpoch of a fresh GET of each; absent
	// reads 0, and a malformed one is an error). TakeOver calls it after
	// acquiring and refuses to lead with an epoch at or below it. Required.
	StoredEpoch func(ctx context.Context) (uint64, error)
	// WhileLeading runs while this candidate holds the Lease, with the epoch
	// to pass to every fenced write of a fence.Client. Its ctx is cancelled
	// when the lead is lost or TakeOver's ctx is done; when it returns, the
	// lead ends. Required.
	WhileLeading func(ctx context.Context, epoch uint64)
}

// TakeOver campaigns for the Lease of opts with client-go's leader election
// (resourcelock.LeaseLock) until it acquires it or ctx is done, then runs
// opts.WhileLeading with the epoch of its acquisition: the
// spec.leaseTransitions it wrote, plus one. It returns once WhileLeading has
// returned and the election has stopped; an error when ctx was done before
// this candidate led (ctx's error), when StoredEpoch failed, or when the
// Lease's epoch is not above the stored one (*LeaseBehindError). A refused candidate never calls WhileLeading and
// stops campaigning; it gives the Lease up only with ReleaseOnCancel, else
// the Lease expires. leases is a clientset's CoordinationV1().
func TakeOver(ctx context.Context, leases coordinationv1client.LeasesGetter, opts TakeOverOptions) error {
	if opts.LeaseNamespace == "" || opts.LeaseName == "" || opts.StoredEpoch == nil || opts.WhileLeading == nil {
		return errors.New("take over: LeaseNamespace, LeaseName, StoredEpoch and WhileLeading are required")
	}
	lock := newAcquisitionLock(leases, opts)
	defaulted := func(d, def time.Duration) time.Duration {
		if d == 0 {
			return def
		}
		return d
	}
	started := make(chan context.Context, 1)
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		Name:            lock.Describe(),
		LeaseDuration:   defaulted(opts.LeaseDuration, 15*time.Second),
		RenewDeadline:   defaulted(opts.RenewDeadline, 10*time.Second),
		RetryPeriod:     defaulted(opts.RetryPeriod, 2*time.Second),
		ReleaseOnCancel: opts.ReleaseOnCancel,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lead context.Context) { started <- lead },
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return fmt.Errorf("take over lease %s: %w", lock.Describe(), err)
	}
	election, stop := context.WithCancel(ctx)
	defer stop()
	stopped := make(chan struct{})
	go func() { defer close(stopped); elector.Run(election) }()
	finish := func(err error) error { stop(); <-stopped; return err }

	var lead context.Context
	select {
	case lead = <-started:
	case <-stopped:
		return ctx.Err()
	}
	epoch, err := lock.acquiredEpoch()
	if err != nil {
		return finish(err)
	}
	stored, err := opts.StoredEpoch(lead)
	if err != nil {
		return finish(fmt.Errorf("take over lease %s: read the stored epoch: %w", lock.Describe(), err))
	}
	if epoch <= stored {
		return finish(&LeaseBehindError{Lease: lock.Describe(), Epoch: epoch, Stored: stored})
	}
	opts.WhileLeading(lead, epoch)
	return finish(nil)
}

// acquisitionLock is a LeaseLock that keeps the first record it writes as
// holder: the acquisition, after which client-go starts leading. Reading the
// count from what was written, not from a later GET, leaves no moment in
// which another holder's count could be read as ours.
type acquisitionLock struct {
	*resourcelock.LeaseLock

	mu       sync.Mutex
	acquired *resourcelock.LeaderElectionRecord
}

func newAcquisitionLock(leases coordinationv1client.LeasesGetter, opts TakeOverOptions) *acquisitionLock {
	prefix := opts.IdentityPrefix
	if prefix == "" {
		prefix, _ = os.Hostname()
	}
	return &acquisitionLock{LeaseLock: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: opts.LeaseNamespace, Name: opts.LeaseName},
		Client:     leases,
		LockConfig: resourcelock.ResourceLockConfig{Identity: prefix + "_" + string(uuid.NewUUID())},
	}}
}

// Create and Update write through the LeaseLock and keep the first record
// this candidate wrote as holder.
func (l *acquisitionLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	return l.keep(r, l.LeaseLock.Create(ctx, r))
}

func (l *acquisitionLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	return l.keep(r, l.LeaseLock.Update(ctx, r))
}

func (l *acquisitionLock) keep(r resourcelock.LeaderElectionRecord, err error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil && l.acquired == nil && r.HolderIdentity == l.Identity() {
		l.acquired = &r
	}
	return err
}

func (l *acquisitionLock) acquiredEpoch() (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.acquired == nil {
		return 0, fmt.Errorf("take over lease %s: leading without a recorded acquisition", l.Describe())
	}
	return epochOfTransitions(l.Describe(), l.acquired.LeaderTransitions)
}
