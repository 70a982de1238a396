package controller

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// Leader runs Run for each term in which this replica holds Lock's Lease,
// and campaigns again when a term ends, until its context is done.
//
// controller-runtime's own leader election ends the process when the Lease
// is lost ("leader election lost"). That suits a binary that only runs
// controllers, not this one: every replica also serves admission, and the
// Lease is lost whenever the API server stays unreachable for longer than
// the renew deadline, as it does while it restarts. Every replica would
// then exit at once and the webhook with them, which is how a restart of
// kube-apiserver became an outage of the webhook
// (TestAPIServerRestartsUnderFencedLoad).
type Leader struct {
	Lock resourcelock.Interface
	// Run does one term's work and returns once its context is done.
	Run func(context.Context) error
	// LeaseDuration, RenewDeadline and RetryPeriod default to
	// controller-runtime's 15 s, 10 s and 2 s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration

	// term is held while a term runs: client-go starts a term in a
	// goroutine of its own, and the next term waits for the last to stop.
	term sync.Mutex
}

// Start implements manager.Runnable.
func (l *Leader) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("leader").WithValues("lease", l.Lock.Describe(), "identity", l.Lock.Identity())
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            l.Lock,
			LeaseDuration:   orDefault(l.LeaseDuration, 15*time.Second),
			RenewDeadline:   orDefault(l.RenewDeadline, 10*time.Second),
			RetryPeriod:     orDefault(l.RetryPeriod, 2*time.Second),
			ReleaseOnCancel: true,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(term context.Context) {
					l.term.Lock()
					defer l.term.Unlock()
					log.Info("elected: rendering the FenceConfig")
					if err := l.Run(term); err != nil {
						log.Error(err, "the render controller stopped")
					}
				},
				OnStoppedLeading: func() {
					if ctx.Err() == nil {
						log.Info("lost the Lease (the API server did not answer within the renew deadline); admission is still served, campaigning again")
					}
				},
			},
		})
		if err != nil {
			return err
		}
		le.Run(ctx) // returns when the term ends, or the campaign with ctx
	}
	l.term.Lock() // the last term has stopped
	defer l.term.Unlock()
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: Leader
// elects itself; the manager runs it on every replica.
func (l *Leader) NeedLeaderElection() bool { return false }

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
