//go:build soak

package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/internal/webhook"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// webhookTimeout is the configuration's timeoutSeconds: an answer later than
// this is a failed call to the API server.
const webhookTimeout = 5 * time.Second

// nested is depth levels of {"a": ...} around a string.
func nested(depth int) string {
	return strings.Repeat(`{"a":`, depth) + `"x"` + strings.Repeat(`}`, depth)
}

func egressRules(n int) []any {
	rules := make([]any, n)
	for i := range rules {
		rules[i] = map[string]any{"toFQDNs": []any{map[string]any{"matchName": fmt.Sprintf("host-%d.example.com", i)}}}
	}
	return rules
}

func fqdns(n, size int) []any {
	out := make([]any, n)
	label := strings.Repeat("a", 60)
	for i := range out {
		name := fmt.Sprintf("h%d", i)
		for len(name)+61 < size {
			name += "." + label
		}
		out[i] = map[string]any{"matchName": name + ".example.com"}
	}
	return out
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// hostileReviews are AdmissionReviews (and non-reviews) posted straight to
// the webhook, all claiming to come from the bound host so that they reach
// the deepest code path.
func hostileReviews(ns, user string) map[string]string {
	review := func(group, kind, op, object string) string {
		r := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"6b4f0d2e-0000-4000-8000-000000000001",` +
			`"kind":{"group":"` + group + `","version":"v2","kind":"` + kind + `"},"resource":{"group":"` + group + `","version":"v2","resource":"x"},` +
			`"namespace":"` + ns + `","name":"namzu-sbx-x","operation":"` + op + `","userInfo":{"username":"` + user + `"}`
		if object != "" {
			r += `,"object":` + object + `,"oldObject":` + object
		}
		return r + `}}`
	}
	cnp := func(meta map[string]any, spec any) string {
		return mustJSON(map[string]any{"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy", "metadata": meta, "spec": spec})
	}
	owner := func(name, uid string) map[string]any {
		return map[string]any{"name": "namzu-sbx-" + uid, "namespace": ns, "ownerReferences": []any{map[string]any{
			"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim", "name": name, "uid": uid}}}
	}
	// Built by hand: encoding/json refuses to write nesting this deep.
	rawCNP := func(meta, spec string) string {
		return `{"apiVersion":"cilium.io/v2","kind":"CiliumNetworkPolicy","metadata":` + meta + `,"spec":` + spec + `}`
	}
	spec := map[string]any{"endpointSelector": map[string]any{"matchLabels": map[string]any{fence.DefaultPerSandboxLabelKey: "c"}}, "egress": egressRules(1)}
	big := owner("c", "u")
	big["annotations"] = map[string]any{"x": strings.Repeat("A", 3<<20)}
	return map[string]string{
		"malformed JSON":                      `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":`,
		"not JSON (64 KiB of bytes)":          string(bytes.Repeat([]byte{0xff, 0x00, '{', '"'}, 16<<10)),
		"empty body":                          ``,
		"JSON null":                           `null`,
		"review without a request":            `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`,
		"wrong kind (a ConfigMap)":            review("", "ConfigMap", "CREATE", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}`),
		"missing object":                      review("cilium.io", "CiliumNetworkPolicy", "CREATE", ""),
		"object null":                         review("cilium.io", "CiliumNetworkPolicy", "CREATE", "null"),
		"object is an array":                  review("cilium.io", "CiliumNetworkPolicy", "UPDATE", "[1,2,3]"),
		"object is a string":                  review("cilium.io", "CiliumNetworkPolicy", "CREATE", `"x"`),
		"ownerReferences is a number":         review("cilium.io", "CiliumNetworkPolicy", "CREATE", `{"metadata":{"ownerReferences":7}}`),
		"3 MiB object":                        review("cilium.io", "CiliumNetworkPolicy", "CREATE", cnp(big, spec)),
		"nesting 9,000 deep":                  review("cilium.io", "CiliumNetworkPolicy", "CREATE", rawCNP(mustJSON(owner("c", "u")), nested(9000))),
		"nesting 200,000 deep":                review("cilium.io", "CiliumNetworkPolicy", "CREATE", rawCNP(mustJSON(owner("c", "u")), nested(200000))),
		"10,000 egress rules":                 review("cilium.io", "CiliumNetworkPolicy", "CREATE", cnp(owner("c", "u"), map[string]any{"egress": egressRules(10000)})),
		"100,000-character owner name":        review("cilium.io", "CiliumNetworkPolicy", "CREATE", cnp(owner(strings.Repeat("n", 100000), "u"), spec)),
		"100,000-character uid":               review("cilium.io", "CiliumNetworkPolicy", "CREATE", cnp(owner("c", strings.Repeat("u", 100000)), spec)),
		"unicode owner name and uid":          review("cilium.io", "CiliumNetworkPolicy", "CREATE", cnp(owner("cl\u202eaim-\u00e9\U0001F600\u0000", "\u0661\u0662\u0663-\uFEFF"), spec)),
		"10,000 ownerReferences":              review("cilium.io", "CiliumNetworkPolicy", "CREATE", cnp(map[string]any{"name": "x", "ownerReferences": egressRules(10000)}, spec)),
		"Sandbox DELETE with garbage options": `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","kind":{"group":"agents.x-k8s.io","version":"v1beta1","kind":"Sandbox"},"operation":"DELETE","namespace":"` + ns + `","name":"s","userInfo":{"username":"` + user + `"},"oldObject":` + nested(9000) + `,"options":{"preconditions":[{}]}}}`,
	}
}

// Scenario 5 (issue 7), part 1: hostile bodies straight to the webhook's
// TLS listener. It must answer every one with an AdmissionReview within
// its timeout, never panic, and stay within bounded memory.
func TestHostileInputToTheWebhook(t *testing.T) {
	const sc = "5 hostile input (webhook)"
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	p := component(t, "webhook")
	rssBefore, err := peakRSS(p.Pid)
	if err != nil {
		t.Fatal(err)
	}
	hc := webhookClient(ctx, t, webhookTimeout)
	user := framework.ServiceAccountUser(env.HostNamespace, framework.HostServiceAccount)
	cases := hostileReviews(env.HostNamespace, user)
	const repeats, workers = 10, 4
	type job struct{ name, path, body string }
	jobs := make(chan job)
	var sent, bad atomic.Int64
	var mu sync.Mutex
	slowest := map[string]time.Duration{}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				sent.Add(1)
				start := time.Now()
				resp, err := hc.Post(webhookURL(p)+j.path, "application/json", strings.NewReader(j.body))
				var out admissionv1.AdmissionReview
				if err == nil {
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, body)
					} else if jerr := json.Unmarshal(body, &out); jerr != nil || out.Response == nil {
						err = fmt.Errorf("not an AdmissionReview with a response (%v): %.200s", jerr, body)
					} else if !out.Response.Allowed && (out.Response.Result == nil || out.Response.Result.Code == 0) {
						err = fmt.Errorf("a refusal without a status: %.200s", body)
					} else if len(out.Response.Patch) > 0 {
						err = fmt.Errorf("a patch: the webhook must never mutate")
					}
				}
				d := time.Since(start)
				mu.Lock()
				if d > slowest[j.name] {
					slowest[j.name] = d
				}
				mu.Unlock()
				if err != nil {
					bad.Add(1)
					t.Errorf("%s on %s: %v (after %s)", j.name, j.path, err, d.Round(time.Millisecond))
				}
			}
		}()
	}
	for range repeats {
		for name, body := range cases {
			select {
			case jobs <- job{name, webhook.CiliumEgressPath, body}:
			case <-ctx.Done():
			}
		}
	}
	close(jobs)
	wg.Wait()
	rssAfter, err := peakRSS(p.Pid)
	if err != nil {
		t.Fatalf("the webhook is gone after hostile input: %v\n%s", err, p.Tail(20))
	}
	logData, _ := os.ReadFile(p.LogPath)
	panics := int64(strings.Count(strings.ToLower(string(logData)), "panic"))
	var restarts int64
	if exited, _ := p.Exited(); exited {
		restarts = 1
	}
	var worst time.Duration
	var worstCase string
	for name, d := range slowest {
		if d > worst {
			worst, worstCase = d, name
		}
	}
	figures.note(sc, "requests", "%d (%d hostile bodies x %d, %d concurrent)", sent.Load(), len(cases), repeats, workers)
	figures.count(t, sc, "requests without a timely AdmissionReview answer", bad.Load(), true)
	figures.note(sc, "slowest answer", "%s (%s; timeout %s)", worst.Round(time.Millisecond), worstCase, webhookTimeout)
	figures.count(t, sc, "panics in the webhook log", panics, true)
	figures.count(t, sc, "webhook exits", restarts, true)
	figures.note(sc, "webhook peak RSS (VmHWM)", "%.1f MiB before, %.1f MiB after", float64(rssBefore)/1024, float64(rssAfter)/1024)
	const rssBound = 256 << 10 // KiB
	var over int64
	if rssAfter > rssBound {
		over = 1
	}
	figures.count(t, sc, "peak RSS over 256 MiB", over, true)
}

// apiCase is a write through the real API server as the bound host.
type apiCase struct {
	name string
	gvr  schema.GroupVersionResource
	obj  *unstructured.Unstructured
	// plausible objects must be admitted: the policies' CEL must never run
	// out of budget on what a host could send.
	plausible bool
	// schema: the CRD's own schema refuses the object before admission,
	// with 422 Invalid. Every other hostile object must be refused by a
	// rule of the fence (its message, HTTP 422).
	schema bool
}

// Scenario 5, part 2: the same kinds of hostile objects through the API
// server, as the bound host. Each is refused with HTTP 422 and a rule's
// message, or, for the cases marked schema only, with 422 Invalid by the
// CRD's schema before admission; never admitted, never a CEL budget error,
// never another status; plausible large objects are admitted.
func TestHostileInputThroughTheAPIServer(t *testing.T) {
	const sc = "5 hostile input (API server)"
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ns := env.HostNamespace
	hp := newHostPolicy(ctx, t)
	valid := &unstructured.Unstructured{}
	if err := json.Unmarshal(hp.valid, &valid.Object); err != nil {
		t.Fatal(err)
	}
	cnp := func(mutate func(u *unstructured.Unstructured)) *unstructured.Unstructured {
		u := valid.DeepCopy()
		u.SetName(u.GetName()) // same owner, so only the mutation is wrong
		mutate(u)
		return u
	}
	sandbox := func(epoch string, mutate func(u *unstructured.Unstructured)) *unstructured.Unstructured {
		u := framework.MakeSandbox(ns, "soak-hostile-"+fmt.Sprint(time.Now().UnixNano()%1e9)).Obj()
		if epoch != "" {
			u.SetAnnotations(map[string]string{fence.AnnotationHolderEpoch: epoch})
		}
		if mutate != nil {
			mutate(u)
		}
		return u
	}
	setEgress := func(rules []any) func(u *unstructured.Unstructured) {
		return func(u *unstructured.Unstructured) { _ = unstructured.SetNestedSlice(u.Object, rules, "spec", "egress") }
	}
	bigEnv := make([]any, 4000)
	for i := range bigEnv {
		bigEnv[i] = map[string]any{"name": fmt.Sprintf("VAR_%d", i), "value": strings.Repeat("v", 200)}
	}
	var deep any = "x"
	for range 2000 {
		deep = map[string]any{"a": deep}
	}
	cases := []apiCase{
		{name: "CNP with 10,000 egress rules", gvr: framework.CNPGVR, obj: cnp(setEgress(egressRules(10000)))},
		{name: "CNP of 2.9 MiB (12,000 long FQDNs)", gvr: framework.CNPGVR, obj: cnp(setEgress([]any{map[string]any{"toFQDNs": fqdns(12000, 240)}}))},
		{name: "CNP with a 240-character name", gvr: framework.CNPGVR, obj: cnp(func(u *unstructured.Unstructured) { u.SetName("namzu-sbx-" + strings.Repeat("a", 230)) })},
		{name: "CNP with a unicode FQDN", gvr: framework.CNPGVR, schema: true, obj: cnp(setEgress([]any{map[string]any{"toFQDNs": []any{map[string]any{"matchName": "b\u00fccher.example"}}}}))},
		{name: "CNP with a unicode selector value", gvr: framework.CNPGVR, schema: true, obj: cnp(func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedStringMap(u.Object, map[string]string{fence.DefaultPerSandboxLabelKey: "cl\u202eaim"}, "spec", "endpointSelector", "matchLabels")
		})},
		{name: "Sandbox epoch in full-width digits", gvr: framework.SandboxGVR, obj: sandbox("\uff11\uff12\uff13", nil)},
		{name: "Sandbox epoch 2^53", gvr: framework.SandboxGVR, obj: sandbox("9007199254740992", nil)},
		{name: "Sandbox epoch with a right-to-left override", gvr: framework.SandboxGVR, obj: sandbox("\u202e12", nil)},
		{name: "Sandbox epoch of 200,000 digits", gvr: framework.SandboxGVR, obj: sandbox("1"+strings.Repeat("0", 199999), nil)},
		{name: "Sandbox with a 100,000-character changed-at", gvr: framework.SandboxGVR, obj: sandbox("1", func(u *unstructured.Unstructured) {
			a := u.GetAnnotations()
			a[fence.AnnotationOperatingModeChangedAt] = strings.Repeat("9", 100000)
			u.SetAnnotations(a)
		})},
		{name: "Sandbox epoch 01 with a pod template nested 2,000 deep", gvr: framework.SandboxGVR, obj: sandbox("01", func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, deep, "spec", "podTemplate", "spec", "x")
		})},
		{name: "plausible: Sandbox with a 0.9 MiB pod template and epoch 7", gvr: framework.SandboxGVR, plausible: true, obj: sandbox("7", func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"name": "main", "image": "namzu/agent:1", "env": bigEnv}}, "spec", "podTemplate", "spec", "containers")
		})},
		{name: "plausible: the host's policy with 48 FQDNs", gvr: framework.CNPGVR, plausible: true, obj: cnp(func(u *unstructured.Unstructured) {
			rules, _, _ := unstructured.NestedSlice(u.Object, "spec", "egress")
			hosts := make([]any, 48)
			for i := range hosts {
				hosts[i] = map[string]any{"matchName": fmt.Sprintf("svc-%d.api.example.com", i)}
			}
			rules[1] = map[string]any{"toFQDNs": hosts}
			_ = unstructured.SetNestedSlice(u.Object, rules, "spec", "egress")
		})},
	}
	var admittedHostile, budget, serverErrors, unexplained, refusedPlausible, wrongRefuser int64
	for _, c := range cases {
		body, _ := json.Marshal(c.obj.Object)
		start := time.Now()
		// Dry run: admission runs in full, nothing is stored. A plausible
		// policy is sent as the host's merge PATCH (it exists already).
		var err error
		if c.plausible && c.gvr == framework.CNPGVR {
			_, err = env.Host.Dynamic.Resource(c.gvr).Namespace(ns).Patch(ctx, c.obj.GetName(), types.MergePatchType, body, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		} else {
			_, err = env.Host.Dynamic.Resource(c.gvr).Namespace(ns).Create(ctx, c.obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		}
		d := time.Since(start)
		v := framework.VerdictOf(err)
		by := v.By
		switch {
		case err == nil:
			by = "admitted"
			if !c.plausible {
				admittedHostile++
				t.Errorf("%s: admitted", c.name)
			}
		case c.plausible:
			refusedPlausible++
			t.Errorf("%s: refused: %v", c.name, err)
		case v.Code >= 500:
			serverErrors++
			t.Errorf("%s: server error %d: %s", c.name, v.Code, v.Message)
		case by != "":
			if c.schema {
				wrongRefuser++
				t.Errorf("%s: refused by %s, want the CRD's schema (422 Invalid) before admission", c.name, by)
			}
			if v.Code != 422 || !strings.HasPrefix(strings.TrimSpace(v.Denial), "cilium-fence:") && !strings.HasPrefix(strings.TrimSpace(v.Denial), "holder-epoch:") {
				unexplained++
				t.Errorf("%s: refused by %s with %d, want 422 with the rule family prefix: %s", c.name, by, v.Code, v.Denial)
			}
		default:
			by = fmt.Sprintf("the API server (%d %s)", v.Code, apiReason(err))
			if !c.schema || v.Code != 422 || apiReason(err) != metav1.StatusReasonInvalid {
				wrongRefuser++
				t.Errorf("%s: refused by %s; only the schema cases may be refused by the API server, and only with 422 Invalid: %s", c.name, by, v.Message)
			}
		}
		if err != nil && (strings.Contains(v.Message, "cost") || strings.Contains(v.Message, "budget")) {
			budget++
			t.Errorf("%s: CEL ran out of budget: %s", c.name, v.Message)
		}
		msg := v.Denial
		if msg == "" {
			msg = v.Message
		}
		figures.note(sc, c.name, "%.0f KiB, %s in %s: `%s`", float64(len(body))/1024, by, d.Round(time.Millisecond), clip(msg, 160))
	}
	figures.count(t, sc, "hostile objects admitted", admittedHostile, true)
	figures.count(t, sc, "plausible objects refused", refusedPlausible, true)
	figures.count(t, sc, "CEL budget errors", budget, true)
	figures.count(t, sc, "server errors (5xx) or refusals without 422 and the rule's message", serverErrors+unexplained, true)
	figures.count(t, sc, "refusals by the API server outside the schema cases, or not 422 Invalid", wrongRefuser, true)
}

func apiReason(err error) metav1.StatusReason { return apierrors.ReasonForError(err) }
