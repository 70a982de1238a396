//go:build soak

package soak

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/e2e/provider"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// outages is the chaos schedule: the webhook is stopped for each duration,
// then restarted and left up until a host write is admitted again.
var outages = []time.Duration{3 * time.Second, 2 * time.Second, 4 * time.Second, 3 * time.Second, 30 * time.Second, 2 * time.Second, 3 * time.Second}

// upTime is how long the webhook stays up after a host write was admitted
// again, before the next stop.
const upTime = 4 * time.Second

// Scenario 2 (issue 7): the webhook is stopped and restarted under load. The
// webhook configuration fails closed (failurePolicy Fail) but is scoped to
// ServiceAccount CiliumNetworkPolicy writes in opted-in namespaces, so an
// outage must refuse exactly those, with a clear message, and nothing else.
// Each outage window runs from the stop signal to the first 200 of /readyz
// after the restart; outside those windows the webhook was up, and a valid
// host write refused then, with a 422 or otherwise, fails the run.
func TestWebhookChaos(t *testing.T) {
	const sc = "2 webhook chaos"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	hp := newHostPolicy(ctx, t)
	load := startLoad(ctx, 40*time.Millisecond, map[string][]func(context.Context) error{
		"valid":     {hp.writeValid, hp.writeValid},
		"invalid":   {hp.writeInvalid},
		"unrelated": unrelatedWriters(ctx, t),
	})
	start := time.Now()
	var readyToAdmit, startToReady []time.Duration
	var windows []window
	var down time.Duration
	for i, outage := range outages {
		p := component(t, "webhook")
		stopAt := time.Now()
		p.Stop(10 * time.Second)
		select {
		case <-time.After(outage): // the outage itself, not a wait for a condition
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		np := restart(t, p)
		startedAt := time.Now()
		readyAt, err := provider.WaitWebhookReady(ctx, np, time.Minute)
		if err != nil {
			load.finish()
			t.Fatalf("restart %d: %v", i+1, err)
		}
		windows = append(windows, window{start: stopAt, end: readyAt})
		down += readyAt.Sub(stopAt)
		startToReady = append(startToReady, readyAt.Sub(startedAt))
		admitAt, err := load.admittedSince(ctx, startedAt, time.Minute)
		if err != nil {
			load.finish()
			t.Fatalf("after restart %d the host was never admitted again: %v", i+1, err)
		}
		readyToAdmit = append(readyToAdmit, admitAt.Sub(readyAt))
		select {
		case <-time.After(upTime): // the webhook's up period in the schedule
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		logf("chaos: outage %d (%s) over; ready %s after start, first admitted write %s after ready",
			i+1, outage, readyAt.Sub(startedAt).Round(time.Millisecond), admitAt.Sub(readyAt).Round(time.Millisecond))
	}
	// Steady state before stopping the load: the last restart is healthy.
	if _, err := load.admittedSince(ctx, time.Now(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	outcomes := load.finish()
	elapsed := time.Since(start)

	var validOK, validInOutage, validUnexplained, valid422Up, validOtherUp, invalidAdmitted, invalidVerdict, invalidInOutage, invalidOtherUp, unrelated, unrelatedFailed int64
	validOutageBy, invalidOutageBy := tally{}, tally{}
	var outageExample string
	for _, o := range outcomes {
		inOutage := o.inAny(windows)
		switch o.kind {
		case "valid":
			switch {
			case o.err == nil:
				validOK++
			case inOutage && outageExplains(o.err):
				validInOutage++
				validOutageBy[enforcer(o.err)]++
				if outageExample == "" && callFailed(o.err) {
					outageExample = o.err.Error()
				}
			case inOutage:
				validUnexplained++
				t.Errorf("a valid host write was refused in an outage window with an answer the outage does not explain (%s-%s): %v",
					o.start.Format("15:04:05.000"), o.at.Format("15:04:05.000"), o.err)
			case framework.VerdictOf(o.err).Code == 422:
				valid422Up++
				t.Errorf("a valid host write was refused with 422 while the webhook was up (%s-%s): %v", o.start.Format("15:04:05.000"), o.at.Format("15:04:05.000"), o.err)
			default:
				validOtherUp++
				t.Errorf("a valid host write failed while the webhook was up (%s-%s): %v", o.start.Format("15:04:05.000"), o.at.Format("15:04:05.000"), o.err)
			}
		case "invalid":
			switch {
			case o.err == nil:
				invalidAdmitted++
			case webhookRefusal(o.err):
				invalidVerdict++
			case inOutage:
				invalidInOutage++
				invalidOutageBy[enforcer(o.err)]++
			default:
				invalidOtherUp++
				t.Errorf("an invented-owner write was refused by something else than the webhook while it was up: %v", o.err)
			}
		case "unrelated":
			unrelated++
			if o.err != nil {
				unrelatedFailed++
				t.Errorf("an unrelated write failed: %v", o.err)
			}
		}
	}
	var spans []string
	for _, w := range windows {
		spans = append(spans, fmt.Sprintf("+%.1fs for %.1fs", w.start.Sub(start).Seconds(), w.end.Sub(w.start).Seconds()))
	}
	figures.note(sc, "schedule", "%d restarts, outages %v, %s in all", len(outages), outages, elapsed.Round(time.Second))
	figures.note(sc, "outage windows (stop signal to /readyz 200)", "%s; %s in all", strings.Join(spans, ", "), down.Round(100*time.Millisecond))
	figures.note(sc, "unrelated writes (operator CNP, host Sandbox, admin ConfigMap)", "%d", unrelated)
	figures.count(t, sc, "unrelated writes failed", unrelatedFailed, true)
	figures.note(sc, "valid host CNP writes", "%d: %d admitted, %d refused in an outage window by what the outage explains (%s)",
		validOK+validInOutage+validUnexplained+valid422Up+validOtherUp, validOK, validInOutage, validOutageBy)
	figures.count(t, sc, "valid host writes refused in an outage window by anything else (a 422 among them)", validUnexplained, true)
	figures.count(t, sc, "valid host writes refused with 422 while the webhook was up", valid422Up, true)
	figures.count(t, sc, "valid host writes failing otherwise while the webhook was up", validOtherUp, true)
	figures.note(sc, "host writes with an invented owner", "%d: %d refused by the webhook's verdict, %d refused in an outage window (%s)", invalidAdmitted+invalidVerdict+invalidInOutage+invalidOtherUp, invalidVerdict, invalidInOutage, invalidOutageBy)
	figures.count(t, sc, "host writes wrongly admitted", invalidAdmitted, true)
	figures.count(t, sc, "invented-owner writes refused by anything but the webhook while it was up", invalidOtherUp, true)
	figures.note(sc, "message of a refusal during outage", "`%s`", clip(outageExample, 260))
	figures.note(sc, "webhook start to ready", "%s", durations(startToReady))
	figures.note(sc, "webhook ready to first admitted write", "%s", durations(readyToAdmit))
	if validInOutage == 0 {
		t.Errorf("no host write was refused during an outage: the outages were not exercised")
	}
}

// outageExplains: the answers a webhook outage gives a valid write, and
// the only ones excused in its window: the API server failing to call it
// (500, failurePolicy Fail), or the webhook's own 503 while it starts or
// stops (its FenceConfig cache not synced). Both are no
// verdict (fence.IsTransient); a 422 in a window is a verdict, and wrong.
func outageExplains(err error) bool {
	return callFailed(err) || fence.IsTransient(err)
}

// clip shortens a message for the table and shows bidirectional controls
// escaped, so a hostile value cannot reorder the rendered table.
func clip(s string, n int) string {
	s = strings.NewReplacer("\u202e", `\u202e`, "\u202d", `\u202d`, "\n", " ", "|", `\|`).Replace(s)
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "..."
	}
	return s
}
