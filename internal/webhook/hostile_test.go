package webhook_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"

	tst "github.com/sandbox-fence/sandbox-fence/internal/testing"
	"github.com/sandbox-fence/sandbox-fence/internal/webhook"
)

// answer is what the API server would get back for one body.
type answer struct {
	HTTP    int
	Allowed bool
	Code    int32
	// Says is a substring of the message (replaced by the whole message
	// when it is missing, so a diff shows what was said instead).
	Says string
}

func hostileReview(kind, op, object string) []byte {
	r := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1",` +
		`"kind":{"group":"cilium.io","version":"v2","kind":"` + kind + `"},"namespace":"` + tst.Namespace + `","name":"namzu-sbx-u",` +
		`"operation":"` + op + `","userInfo":{"username":"` + tst.HostUser + `"}`
	if object != "" {
		r += `,"object":` + object
	}
	return []byte(r + `}}`)
}

func hostileCNP(ownerName, uid, spec string) string {
	return `{"apiVersion":"cilium.io/v2","kind":"CiliumNetworkPolicy","metadata":{"name":"namzu-sbx-` + uid + `","ownerReferences":[` +
		`{"apiVersion":"extensions.agents.x-k8s.io/v1beta1","kind":"SandboxClaim","name":` + mustQuote(ownerName) + `,"uid":` + mustQuote(uid) + `}]},"spec":` + spec + `}`
}

func mustQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func manyRules(n int) string {
	rules := make([]string, n)
	for i := range rules {
		rules[i] = fmt.Sprintf(`{"toFQDNs":[{"matchName":"h%d.example.com"}]}`, i)
	}
	return `{"egress":[` + strings.Join(rules, ",") + `]}`
}

func deep(n int) string { return strings.Repeat(`{"a":`, n) + `1` + strings.Repeat(`}`, n) }

// TestHostileAdmissionReviews sends the hostile bodies of issue 7 to the
// CiliumNetworkPolicy path, with panics not recovered: each must be
// answered with an AdmissionReview (a refusal of garbage included) well
// within the configuration's timeoutSeconds (5), and a refusal must be a
// status the API server relays, never a mutation. FuzzAdmissionReview
// covers arbitrary bytes; these are the large and deep ones a fuzzer does
// not reach in a short run.
func TestHostileAdmissionReviews(t *testing.T) {
	ownerMissing := "SandboxClaim"
	tests := []struct {
		name string
		body []byte
		want answer
	}{
		{name: "malformed JSON is a bad request", body: []byte(`{"apiVersion":"admission.k8s.io/v1","request":{"uid":`),
			want: answer{HTTP: 200, Code: 400, Says: "unexpected end of JSON input"}},
		{name: "an empty body is a bad request", body: nil,
			want: answer{HTTP: 200, Code: 400, Says: "request body is empty"}},
		{name: "a review of a ConfigMap is not checked", body: hostileReview("ConfigMap", "CREATE", `{"kind":"ConfigMap"}`),
			want: answer{HTTP: 200, Allowed: true, Code: 200, Says: "only CREATE, UPDATE and DELETE of CiliumNetworkPolicy are checked"}},
		{name: "a review without an object is refused", body: hostileReview("CiliumNetworkPolicy", "CREATE", ""),
			want: answer{HTTP: 200, Code: 422, Says: "cilium-fence: "}},
		{name: "an array object is refused", body: hostileReview("CiliumNetworkPolicy", "CREATE", `[1,2]`),
			want: answer{HTTP: 200, Code: 422, Says: "not a decodable CiliumNetworkPolicy"}},
		{name: "a 3 MiB object with an unknown owner is refused", body: hostileReview("CiliumNetworkPolicy", "CREATE",
			hostileCNP("c", "u", `{"x":"`+strings.Repeat("A", 3<<20)+`"}`)),
			want: answer{HTTP: 200, Code: 422, Says: ownerMissing}},
		{name: "an object nested 9,000 deep is refused", body: hostileReview("CiliumNetworkPolicy", "CREATE", hostileCNP("c", "u", deep(9000))),
			want: answer{HTTP: 200, Code: 422, Says: ownerMissing}},
		{name: "a review nested 200,000 deep is a bad request", body: hostileReview("CiliumNetworkPolicy", "CREATE", hostileCNP("c", "u", deep(200000))),
			want: answer{HTTP: 200, Code: 400, Says: "exceeded max depth"}},
		{name: "10,000 egress rules with an unknown owner are refused", body: hostileReview("CiliumNetworkPolicy", "CREATE", hostileCNP("c", "u", manyRules(10000))),
			want: answer{HTTP: 200, Code: 422, Says: ownerMissing}},
		{name: "a 100,000-character owner name is refused", body: hostileReview("CiliumNetworkPolicy", "CREATE", hostileCNP(strings.Repeat("n", 100000), "u", `{}`)),
			want: answer{HTTP: 200, Code: 422, Says: "cilium-fence: "}},
		{name: "a unicode owner name and uid are refused", body: hostileReview("CiliumNetworkPolicy", "CREATE", hostileCNP("cl\u202eaim-\U0001F600\u0000", "\u0661\u0662-\uFEFF", `{}`)),
			want: answer{HTTP: 200, Code: 422, Says: "cilium-fence: "}},
	}
	srv := fuzzServer(t)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			r := httptest.NewRequest(http.MethodPost, webhook.CiliumEgressPath, bytes.NewReader(tc.body))
			if len(tc.body) == 0 {
				r.Body = http.NoBody // what net/http hands a handler for Content-Length: 0
			}
			r.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			srv.ServeHTTP(w, r)
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("answered after %s: the API server gives up after timeoutSeconds 5", d)
			}
			got := answer{HTTP: w.Code}
			var out admissionv1.AdmissionReview
			if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || out.Response == nil {
				t.Fatalf("not an AdmissionReview with a response (%v): %.300s", err, w.Body.String())
			}
			if len(out.Response.Patch) > 0 {
				t.Errorf("the webhook returned a patch; it must never mutate")
			}
			got.Allowed = out.Response.Allowed
			msg := ""
			if out.Response.Result != nil {
				got.Code, msg = out.Response.Result.Code, out.Response.Result.Message
			}
			got.Says = tc.want.Says
			if !strings.Contains(msg, tc.want.Says) {
				got.Says = msg
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("answer (-want +got):\n%s", d)
			}
		})
	}
	// Bounded memory: nothing a hostile request allocated is kept.
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	retained := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	hwm := vmHWM(t)
	t.Logf("heap retained after all cases: %d KiB; allocated in all: %d MiB; peak RSS of the test process: %d MiB",
		retained>>10, (after.TotalAlloc-before.TotalAlloc)>>20, hwm>>10)
	if retained > 16<<20 {
		t.Errorf("%d MiB of heap retained after the hostile requests: something keeps request data", retained>>20)
	}
	if hwm > 512<<10 {
		t.Errorf("peak RSS %d MiB: a hostile request costs more memory than a webhook pod's limit allows", hwm>>10)
	}
}

// vmHWM is the peak resident set of this process in KiB (0 where /proc is
// not available).
func vmHWM(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Logf("no /proc/self/status: peak RSS not measured")
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			var kib int64
			fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kib)
			return kib
		}
	}
	return 0
}
