//go:build soak

package soak

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/internal/webhook"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// Scenario 4 (issue 7): kube-apiserver restarts under a running webhook.
// The webhook keeps its process (no restart), its informers reconnect, and
// owner lookups are answered from the cache again: an owner created after
// the restart is found in the cache, not only through the live fallback.
func TestAPIServerRestart(t *testing.T) {
	const sc = "4 apiserver restart"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	wh := component(t, "webhook")
	ap := component(t, "kube-apiserver")
	// The host's policy for a claim from before the restart, and the same
	// body with an invented owner: probes sent from the moment the API
	// server is ready until the webhook's cache is back.
	hp := newHostPolicy(ctx, t)
	unrelated := unrelatedWriters(ctx, t)

	stopAt := time.Now()
	ap.Stop(15 * time.Second)
	stoppedAt := time.Now()
	restart(t, ap)
	readyAt, err := apiserverReady(ctx, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	logf("apiserver restart: ready %s after stop", readyAt.Sub(stopAt).Round(time.Millisecond))
	probes := startLoad(ctx, 100*time.Millisecond, map[string][]func(context.Context) error{
		"valid":     {hp.writeValid},
		"invalid":   {hp.writeInvalid},
		"unrelated": unrelated,
	})
	if err := env.WaitForEnforcement(ctx, logf); err != nil {
		probes.finish()
		t.Fatalf("policies and webhook after the restart: %v", err)
	}
	enforcedAt := time.Now()

	// An owner born after the restart: only a reconnected informer can put
	// it in the cache.
	ns := env.HostNamespace
	claimName := "soak-after-restart-" + rand.String(5)
	claim, err := env.Host.Dynamic.Resource(framework.ClaimGVR).Namespace(ns).Create(ctx,
		framework.MakeClaim(ns, claimName).PodLabel(fence.DefaultPerSandboxLabelKey, claimName).Obj(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Admin.Dynamic.Resource(framework.ClaimGVR).Namespace(ns).Delete(context.Background(), claimName, metav1.DeleteOptions{})
	})
	in := fence.PolicyInput{Owner: fence.PolicyOwner{Kind: "SandboxClaim", Name: claimName, UID: string(claim.GetUID())}, Namespace: ns, Hosts: []string{"example.com"}}
	policy, err := fence.BuildPerSandboxPolicy(in)
	if err != nil {
		t.Fatal(err)
	}
	cacheHits := func() float64 {
		return metric(t, wh, webhook.LookupSecondsMetric+"_count", `kind="SandboxClaim"`, `source="cache"`, `result="found"`)
	}
	var writes, refused int64
	before := cacheHits()
	var hitAt time.Time
	err = framework.Eventually(ctx, time.Minute, 50*time.Millisecond, "a post-restart owner found in the webhook's cache", func(ctx context.Context) (bool, string, error) {
		writes++
		_, err := env.Host.Dynamic.Resource(framework.CNPGVR).Namespace(ns).Create(ctx, policy, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			refused++
			return false, err.Error(), nil
		}
		if cacheHits() <= before {
			return false, "admitted through the live fallback, not the cache yet", nil
		}
		hitAt = time.Now()
		return true, "", nil
	})
	if err != nil {
		probes.finish()
		t.Fatal(err)
	}
	// The restart window ends once the webhook itself has refused an
	// invented-owner probe, and lasts at least 10 s from ready (the
	// schedule, not a condition).
	var webhookAt time.Time
	err = framework.Eventually(ctx, 2*time.Minute, 50*time.Millisecond, "an invented-owner probe refused by the webhook", func(context.Context) (bool, string, error) {
		for _, o := range probes.snapshot() {
			if o.kind == "invalid" && o.err != nil && webhookRefusal(o.err) {
				webhookAt = o.at
				return true, "", nil
			}
		}
		return false, "none yet", nil
	})
	select {
	case <-time.After(time.Until(readyAt.Add(10 * time.Second))):
	case <-ctx.Done():
	}
	outcomes := probes.finish()
	if err != nil {
		t.Error(err)
	}
	var probeOK, probeRefused, probeVerdict, inventedAdmitted, inventedRefused, inventedByWebhook, unrelatedN, unrelatedFailed int64
	validBy, inventedBy, unrelatedBy := tally{}, tally{}, tally{}
	var firstOK time.Time
	refusals := map[string]int{}
	for _, o := range outcomes {
		switch {
		case o.kind == "unrelated":
			unrelatedN++
			unrelatedBy[enforcer(o.err)]++
			if o.err != nil {
				unrelatedFailed++
				refusals["unrelated: "+clip(o.err.Error(), 300)]++
			}
		case o.kind == "valid" && o.err == nil:
			probeOK++
			validBy[enforcer(o.err)]++
			if firstOK.IsZero() || o.at.Before(firstOK) {
				firstOK = o.at
			}
		case o.kind == "valid":
			probeRefused++
			validBy[enforcer(o.err)]++
			refusals["host policy: "+clip(o.err.Error(), 300)]++
			if !fence.IsTransient(o.err) {
				probeVerdict++
			}
		case o.err == nil:
			inventedAdmitted++
			inventedBy[enforcer(o.err)]++
		default:
			inventedRefused++
			inventedBy[enforcer(o.err)]++
			if webhookRefusal(o.err) {
				inventedByWebhook++
			}
		}
	}
	in.Owner.UID = "00000000-0000-0000-0000-000000000000"
	invented, _ := fence.BuildPerSandboxPolicy(in)
	_, err = env.Host.Dynamic.Resource(framework.CNPGVR).Namespace(ns).Create(ctx, invented, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err == nil || !webhookRefusal(err) {
		t.Errorf("an invented owner uid after the restart: want the webhook's refusal, got %v", err)
	}

	var webhookRestarts int64
	if exited, _ := wh.Exited(); exited || component(t, "webhook").Pid != wh.Pid {
		webhookRestarts = 1
		t.Errorf("the webhook did not survive the API server restart:\n%s", wh.Tail(20))
	}
	live := metric(t, wh, webhook.LookupSecondsMetric+"_count", `kind="SandboxClaim"`, `source="live"`)
	figures.note(sc, "kube-apiserver stop (SIGTERM, SIGKILL after 15 s) / restart to ready", "%s / %s", stoppedAt.Sub(stopAt).Round(time.Millisecond), readyAt.Sub(stoppedAt).Round(time.Millisecond))
	figures.note(sc, "ready to every enforcement marker denied (VAPs and webhook)", "%s", enforcedAt.Sub(readyAt).Round(time.Millisecond))
	figures.note(sc, "ready to a post-restart owner served from the webhook cache", "%s (%d dry-run writes, %d refused before; %v live lookups in the webhook's life)",
		hitAt.Sub(readyAt).Round(time.Millisecond), writes, refused, live)
	figures.note(sc, "restart window: probes every 100 ms from ready until the webhook refused an invented owner and the cache is back, at least 10 s", "%s; first webhook refusal %s after ready",
		time.Since(readyAt).Round(100*time.Millisecond), webhookAt.Sub(readyAt).Round(time.Millisecond))
	figures.note(sc, "valid probes, by what answered", "%d: %s (first admitted %s after ready)", probeOK+probeRefused, validBy, firstOK.Sub(readyAt).Round(time.Millisecond))
	figures.note(sc, "invented-owner probes, by what refused", "%d: %s", inventedAdmitted+inventedRefused, inventedBy)
	figures.atLeast(t, sc, "invented-owner probes refused by the webhook in the restart window", inventedByWebhook, 1)
	// No window after a start: a valid write may
	// meet an answer that is no verdict (the webhook's informers
	// reconnecting), never a verdict; an unrelated write nothing at all.
	figures.note(sc, "unrelated probes (operator CNP, host Sandbox, admin ConfigMap), by what answered", "%d: %s", unrelatedN, unrelatedBy)
	figures.count(t, sc, "unrelated probes refused after ready", unrelatedFailed, true)
	figures.count(t, sc, "valid probes refused with a verdict after ready", probeVerdict, true)
	for msg, n := range refusals {
		figures.note(sc, "probe refused after the restart", "%dx `%s`", n, msg)
	}
	figures.count(t, sc, "invented-owner writes admitted after the restart", inventedAdmitted, true)
	figures.count(t, sc, "webhook restarts needed", webhookRestarts, true)
	figures.count(t, sc, "post-restart writes refused once the cache had the owner", refusedAfter(ctx, t, policy), true)
}

// refusedAfter sends the owner's valid policy 200 times (dry run) and
// counts refusals: once the cache is back, lookups must simply work.
func refusedAfter(ctx context.Context, t *testing.T, policy *unstructured.Unstructured) int64 {
	t.Helper()
	var n int64
	for range 200 {
		_, err := env.Host.Dynamic.Resource(framework.CNPGVR).Namespace(policy.GetNamespace()).Create(ctx, policy, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			n++
			if n == 1 {
				t.Errorf("valid write refused after recovery: %v", err)
			}
		}
	}
	return n
}
