//go:build soak

package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// webhookName is the shipped webhook the API server names in its messages.
const webhookName = "cilium-egress.fence.sandbox.namzu.ai"

// hostPolicy is the host's own per-sandbox policy: a claim created as the
// host and its per-sandbox policy, written through pkg/fence while the webhook
// is up. Its merge PATCH (an UPDATE the webhook verifies) is the "valid host
// write" of the load; the same body with an invented owner uid is the write
// the webhook must refuse.
type hostPolicy struct {
	valid   []byte // merge patch body
	name    string
	invalid *unstructured.Unstructured
}

func newHostPolicy(ctx context.Context, t *testing.T) hostPolicy {
	t.Helper()
	ns := env.HostNamespace
	claimName := "soak-claim-" + rand.String(6)
	claim, err := env.Host.Dynamic.Resource(framework.ClaimGVR).Namespace(ns).Create(ctx,
		framework.MakeClaim(ns, claimName).PodLabel(fence.DefaultPerSandboxLabelKey, claimName).Obj(), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create claim as the host: %v", err)
	}
	t.Cleanup(func() {
		_ = env.Admin.Dynamic.Resource(framework.ClaimGVR).Namespace(ns).Delete(context.Background(), claimName, metav1.DeleteOptions{})
	})
	in := fence.PolicyInput{Owner: fence.PolicyOwner{Kind: "SandboxClaim", Name: claimName, UID: string(claim.GetUID())}, Namespace: ns,
		Hosts: []string{"registry.npmjs.org", ".example.com"}}
	stored, err := fence.NewClient(env.Host.Dynamic, fence.Options{}).ApplyEgress(ctx, in)
	if err != nil {
		t.Fatalf("the host's own policy, with the webhook up: %v", err)
	}
	policy, err := fence.BuildPerSandboxPolicy(in)
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(policy.Object)
	if err != nil {
		t.Fatal(err)
	}
	fake := string(uuid.NewUUID())
	in.Owner.UID = fake
	invalid, err := fence.BuildPerSandboxPolicy(in)
	if err != nil {
		t.Fatal(err)
	}
	return hostPolicy{valid: body, name: stored.GetName(), invalid: invalid}
}

// writeValid is the host's merge PATCH of its own policy (the write after a
// 409): admitted whenever the webhook can be asked.
func (h hostPolicy) writeValid(ctx context.Context) error {
	_, err := env.Host.Dynamic.Resource(framework.CNPGVR).Namespace(env.HostNamespace).Patch(ctx, h.name, types.MergePatchType, h.valid, metav1.PatchOptions{})
	return err
}

// writeInvalid creates (dry run: nothing is left if it were admitted) a
// policy whose owner uid no claim has: only the webhook can tell.
func (h hostPolicy) writeInvalid(ctx context.Context) error {
	_, err := env.Host.Dynamic.Resource(framework.CNPGVR).Namespace(env.HostNamespace).Create(ctx, h.invalid, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	return err
}

// unrelatedWriters are writes the webhook must never stand in the way of:
// a human operator's own CiliumNetworkPolicy in a fenced namespace (the
// configuration's matchCondition routes only ServiceAccounts to the
// webhook), the host's unfenced Sandbox write (policies only), and an admin
// ConfigMap write outside the fenced namespaces.
func unrelatedWriters(ctx context.Context, t *testing.T) []func(context.Context) error {
	t.Helper()
	ns := env.HostNamespace
	base := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
		"metadata": map[string]any{"name": "soak-operator-baseline-" + rand.String(5), "namespace": ns},
		"spec": map[string]any{"endpointSelector": map[string]any{}, "egress": []any{map[string]any{
			"toEndpoints": []any{map[string]any{"matchLabels": map[string]any{"k8s:io.kubernetes.pod.namespace": "kube-system", "k8s:k8s-app": "kube-dns"}}}}}},
	}}
	if _, err := env.Operator.Dynamic.Resource(framework.CNPGVR).Namespace(ns).Create(ctx, base, metav1.CreateOptions{}); err != nil {
		t.Fatalf("operator baseline policy: %v", err)
	}
	sbxName := "soak-unrelated-" + rand.String(5)
	if _, err := fence.NewClient(env.Host.Dynamic, fence.Options{}).CreateWorkspace(ctx, framework.MakeSandbox(ns, sbxName).Obj(), fence.WriteOptions{Epoch: new(uint64(1))}); err != nil {
		t.Fatalf("host sandbox: %v", err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "soak-unrelated-" + rand.String(5), Namespace: "default"}}
	if _, err := env.Admin.Kube.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bg := context.Background()
		_ = env.Admin.Dynamic.Resource(framework.CNPGVR).Namespace(ns).Delete(bg, base.GetName(), metav1.DeleteOptions{})
		_ = env.Admin.Dynamic.Resource(framework.SandboxGVR).Namespace(ns).Delete(bg, sbxName, metav1.DeleteOptions{})
		_ = env.Admin.Kube.CoreV1().ConfigMaps("default").Delete(bg, cm.Name, metav1.DeleteOptions{})
	})
	n := atomic.Int64{}
	return []func(context.Context) error{
		func(ctx context.Context) error {
			body := fmt.Sprintf(`{"metadata":{"annotations":{"soak/n":"%d"}}}`, n.Add(1))
			_, err := env.Operator.Dynamic.Resource(framework.CNPGVR).Namespace(ns).Patch(ctx, base.GetName(), types.MergePatchType, []byte(body), metav1.PatchOptions{})
			return err
		},
		func(ctx context.Context) error {
			mode := "Suspended"
			if n.Add(1)%2 == 0 {
				mode = "Running"
			}
			body := fmt.Sprintf(`{"metadata":{"annotations":{"sandbox.namzu.ai/operating-mode-changed-at":"%s"}},"spec":{"operatingMode":%q}}`,
				time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), mode)
			_, err := env.Host.Dynamic.Resource(framework.SandboxGVR).Namespace(ns).Patch(ctx, sbxName, types.MergePatchType, []byte(body), metav1.PatchOptions{})
			return err
		},
		func(ctx context.Context) error {
			body := fmt.Sprintf(`{"data":{"n":"%d"}}`, n.Add(1))
			_, err := env.Admin.Kube.CoreV1().ConfigMaps("default").Patch(ctx, cm.Name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
			return err
		},
	}
}

// outcome is one write of the load.
type outcome struct {
	kind  string    // valid, invalid, unrelated
	start time.Time // sent
	at    time.Time // answered
	err   error
}

// during reports whether the write was in flight at some moment of w.
func (o outcome) during(w window) bool { return o.start.Before(w.end) && o.at.After(w.start) }

// window is a span of time, such as an outage of the webhook: from the stop
// signal to the first 200 of /readyz after the restart.
type window struct{ start, end time.Time }

// inAny reports whether o overlaps any of ws.
func (o outcome) inAny(ws []window) bool { return slices.ContainsFunc(ws, o.during) }

// loadRun runs writers at a steady pace until stop is closed and records
// every outcome.
type loadRun struct {
	mu       sync.Mutex
	outcomes []outcome
	wg       sync.WaitGroup
	stop     chan struct{}
	lastOK   atomic.Int64 // unix nanos of the last admitted valid write
}

func startLoad(ctx context.Context, pace time.Duration, writers map[string][]func(context.Context) error) *loadRun {
	l := &loadRun{stop: make(chan struct{})}
	for kind, fs := range writers {
		for _, f := range fs {
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				tick := time.NewTicker(pace)
				defer tick.Stop()
				for {
					select {
					case <-l.stop:
						return
					case <-ctx.Done():
						return
					case <-tick.C:
					}
					wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
					sent := time.Now()
					err := f(wctx)
					cancel()
					now := time.Now()
					if kind == "valid" && err == nil {
						l.lastOK.Store(now.UnixNano())
					}
					l.mu.Lock()
					l.outcomes = append(l.outcomes, outcome{kind: kind, start: sent, at: now, err: err})
					l.mu.Unlock()
				}
			}()
		}
	}
	return l
}

func (l *loadRun) finish() []outcome {
	close(l.stop)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]outcome(nil), l.outcomes...)
}

// snapshot returns the outcomes so far, the load still running.
func (l *loadRun) snapshot() []outcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]outcome(nil), l.outcomes...)
}

// admittedSince waits until a valid write was admitted after t.
func (l *loadRun) admittedSince(ctx context.Context, t time.Time, timeout time.Duration) (time.Time, error) {
	var at time.Time
	err := framework.Eventually(ctx, timeout, 10*time.Millisecond, "a valid host write admitted", func(context.Context) (bool, string, error) {
		at = time.Unix(0, l.lastOK.Load())
		return at.After(t), "none since " + t.Format("15:04:05.000"), nil
	})
	return at, err
}

// webhookRefusal is the webhook's own verdict (its family prefix), as the API
// server relays it.
func webhookRefusal(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, `admission webhook "`+webhookName+`" denied the request`) && strings.Contains(msg, "cilium-fence:")
}

// callFailed is the API server failing closed because it could not ask the
// webhook (failurePolicy Fail): connection refused, TLS, timeout.
func callFailed(err error) bool {
	return strings.Contains(err.Error(), `failed calling webhook "`+webhookName+`"`)
}

// vapConfigErrorRE is a policy the API server could not configure (a
// resource of its matchConstraints it cannot map, say): it refuses before
// the policy's own rules and before any webhook is asked. No shipped policy
// has a paramKind, whose resolution this was while one did.
var vapConfigErrorRE = regexp.MustCompile(`ValidatingAdmissionPolicy '([^']+)' denied request: failed to configure policy`)

// enforcer names what refused a write: the webhook's verdict, the API
// server failing to call the webhook, a policy's rule or its configuration
// error, or the API server itself (with its status code and reason).
func enforcer(err error) string {
	if err == nil {
		return "admitted"
	}
	v := framework.VerdictOf(err)
	switch {
	case webhookRefusal(err):
		return "webhook (" + fmt.Sprint(v.Code) + ")"
	case callFailed(err):
		return "webhook call failed (" + fmt.Sprint(v.Code) + ")"
	case v.By != "":
		return "VAP " + v.By + " (" + fmt.Sprint(v.Code) + ")"
	}
	if m := vapConfigErrorRE.FindStringSubmatch(v.Message); m != nil {
		return "VAP " + m[1] + " configuration error (" + fmt.Sprint(v.Code) + ")"
	}
	return fmt.Sprintf("API server (%d %s)", v.Code, apierrors.ReasonForError(err))
}

// tally counts outcomes per key in a stable order for the figure table.
type tally map[string]int64

func (c tally) String() string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", c[k], k)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func durations(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return fmt.Sprintf("min %s / median %s / max %s (n=%d)", ds[0].Round(time.Millisecond), ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond), len(ds))
}
