package webhook_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"

	fixture "github.com/sandbox-fence/sandbox-fence/internal/testing/review"
)

// BenchmarkCiliumWebhookServeHTTP is the webhook end to end inside the
// process: raw AdmissionReview bytes in, response bytes out, through
// controller-runtime's admission.Webhook (decode, handler, encode), the
// FenceConfig read, the owner lookup from a cache that deep-copies like the
// informer cache, the rule and the metrics. TLS, the socket and the live
// owner read are not in it (make bench's scale run measures the webhook
// process with them). The FenceConfig binds one namespace, or
// the 512 the schema allows at most.
func BenchmarkCiliumWebhookServeHTTP(b *testing.B) {
	for _, c := range []struct {
		name       string
		kind       fixture.Kind
		allowed    bool
		namespaces int
	}{
		{"admitted", fixture.Admitted, true, 0},
		{"denied, invented owner", fixture.Denied, false, 0},
		{"admitted, FenceConfig of 512 namespaces", fixture.Admitted, true, 511},
	} {
		h := fixture.Handler(nil, c.namespaces)
		b.Run(c.name, func(b *testing.B) {
			body, err := fixture.Build(1, c.kind)
			if err != nil {
				b.Fatal(err)
			}
			serve := func() *httptest.ResponseRecorder {
				req := httptest.NewRequest(http.MethodPost, "/validate-cilium-egress", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				return rec
			}
			// The verdict is checked once, outside the timed loop.
			rec := serve()
			var out admissionv1.AdmissionReview
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil || out.Response.Allowed != c.allowed {
				b.Fatalf("want allowed=%v, got HTTP %d %s (%v)", c.allowed, rec.Code, rec.Body, err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if rec := serve(); rec.Code != http.StatusOK {
					b.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
				}
			}
			b.ReportMetric(float64(len(body)), "review-bytes")
		})
	}
}
