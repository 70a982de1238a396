//go:build e2e

// This file is named to sort last: go test runs a package's tests in the
// order of their files, and this case restarts kube-apiserver up to 20
// times. On kind, a webhook pod's reads of the API server through its
// Service address can hang for seconds after such restarts (RELIABILITY.md
// finding 8); the cases that count every refusal under load (the in-cluster
// cases, the lifecycle case) measure what they name only when they run
// before it.

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// For up to 30 s after an API server starts, a policy whose paramKind it
// cannot map yet refuses everything its match constraints match, before it
// looks at who asks (contract §8.8). The fence keeps that to policy requests
// in opted-in namespaces, where it fails closed, bound hosts included; the
// garbage collector and the namespace controller retry, so a namespace
// holding fenced objects whose deletion starts in that window is still
// deleted, without anyone's help. The window shows at some starts only (a
// race inside the API server): the case restarts until it sees it.
func TestNamespaceDeletedThroughTheAPIServerStartupWindow(t *testing.T) {
	// The window is a property of the shipped policies' paramKind.
	requireShipped(t)
	if env.APIServerProcess == nil {
		t.Skipf("the %s provider gives the suite no handle on kube-apiserver (Env.APIServerProcess is nil): start-up window case not run", env.Provider)
	}
	// Up to 20 restarts of about 20 s each, then up to 3 minutes for the
	// namespace: more than testContext's 3 minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	t.Cleanup(cancel)
	// The window is open while an operator's policy write in a fenced
	// namespace is refused as a configuration error of the egress policy
	// (a policy-level error: the message names no binding).
	configError := func(err error) bool {
		return err != nil && apierrors.IsInvalid(err) &&
			strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+framework.PolicyCiliumEgress+"' denied request: failed to configure policy")
	}
	operatorProbe := func(ctx context.Context) error {
		_, err := env.Operator.Dynamic.Resource(framework.CNPGVR).Namespace(env.HostNamespace).Create(ctx, operatorPolicy(env.HostNamespace), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	// Whatever happens, no later test may run in the window.
	windowClosed := func(ctx context.Context) error {
		return framework.Eventually(ctx, 2*time.Minute, 250*time.Millisecond, "the start-up window closed", func(ctx context.Context) (bool, string, error) {
			err := operatorProbe(ctx)
			return err == nil, framework.VerdictOf(err).String(), nil
		})
	}
	t.Cleanup(func() {
		if err := windowClosed(context.Background()); err != nil {
			t.Error(err)
		}
	})

	hostProbe := func(ctx context.Context) error {
		bad, err := env.PerSandboxPolicy(fence.OwnerKindSandboxClaim, "window", "00000000-0000-4000-8000-000000000003", []string{"example.com"})
		if err != nil {
			return err
		}
		bad.SetName("window-without-prefix")
		_, err = env.Host.Dynamic.Resource(framework.CNPGVR).Namespace(env.HostNamespace).Create(ctx, bad, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	// inWindow is what the prober saw and did the moment the window showed.
	type inWindow struct {
		at                 time.Time
		hostErr, deleteErr error
	}

	// How often a restart shows it, measured here: at 6 of 15 restarts in
	// six runs of the case (2026-12-01, local control plane); later runs
	// showed it at the 1st, the 1st, the 3rd (kind) and once only at the
	// 10th restart (2026-12-02). At one restart in three, 20 miss it about
	// once in 3,000 runs; each restart that misses costs 10-20 s.
	const attempts = 20
	// One namespace for every attempt: it is deleted only in the window,
	// so no deletion runs on across a restart.
	doomed := fencedNamespaceWithObjects(t)
	for attempt := 1; attempt <= attempts; attempt++ {
		// The window may close before /readyz passes (requests are served
		// before it), so the operator's probe runs from before the restart,
		// through the start-up, until 5 s after ready; the moment it meets
		// the window, the host is probed and the doomed namespace's deletion
		// starts, inside the window.
		var seen *inWindow
		pctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for pctx.Err() == nil {
				rctx, cancel := context.WithTimeout(pctx, time.Second)
				err := operatorProbe(rctx)
				if configError(err) {
					w := &inWindow{at: time.Now(), hostErr: hostProbe(rctx)}
					w.deleteErr = env.Admin.Kube.CoreV1().Namespaces().Delete(rctx, doomed, metav1.DeleteOptions{})
					cancel()
					seen = w
					return
				}
				cancel()
				time.Sleep(20 * time.Millisecond)
			}
		}()
		restartErr := env.APIServerProcess.Restart(ctx)
		readyAt := time.Now()
		if restartErr == nil {
			select {
			case <-done:
			case <-time.After(5 * time.Second):
			}
		}
		stop()
		<-done
		if restartErr != nil {
			t.Fatal(restartErr)
		}
		open := seen != nil
		if open {
			if !configError(seen.hostErr) {
				t.Errorf("the host's policy write in the window: want the egress policy's configuration error (fails closed, 422), got %v", seen.hostErr)
			}
			if seen.deleteErr != nil {
				t.Fatalf("deleting namespace %s in the window: %v", doomed, seen.deleteErr)
			}
			if err := windowClosed(ctx); err != nil {
				t.Fatal(err)
			}
			closedAt := time.Now()
			waitNamespaceGone(t, doomed, 3*time.Minute)
			removeLeftovers(t, doomed)
			t.Logf("restart %d: start-up window seen %s after the API server was ready (negative: before), closed by %s after; namespace %s, whose deletion started in it, gone %s after it was seen",
				attempt, seen.at.Sub(readyAt).Round(time.Millisecond), closedAt.Sub(readyAt).Round(time.Millisecond), doomed, time.Since(seen.at).Round(time.Millisecond))
		} else {
			// Not this start: the namespace waits for the next one.
			if err := windowClosed(ctx); err != nil {
				t.Fatal(err)
			}
			t.Logf("restart %d: start-up window not seen", attempt)
		}
		if err := env.WaitForEnforcement(ctx, t.Logf); err != nil {
			t.Fatal(err)
		}
		if open {
			return
		}
	}
	t.Fatalf("the start-up window did not show in %d API server restarts, so this run proved nothing about it; run again (it showed at about one restart in three here)", attempts)
}
