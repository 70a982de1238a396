package webhook_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	tst "github.com/sandbox-fence/sandbox-fence/internal/testing"
	"github.com/sandbox-fence/sandbox-fence/internal/webhook"
)

// fuzzServer serves the path exactly as the binary does, but with panics
// NOT recovered, so a panic anywhere in decoding or the rules fails the fuzz
// run instead of becoming a 500.
func fuzzServer(t testing.TB) http.Handler {
	claim := tst.MakeClaim("a").Obj()
	cfg := tst.MakeConfig(fencev1alpha1.DefaultConfigName).UniqueOwnerLabel().Obj()
	cache := fakeReader(t, []client.Object{cfg, claim, tst.MakeSandbox("s").Epoch("3").Obj(), tst.MakeClaim("b").PodLabel(tst.LabelKey, "a").Obj()}...)
	src := webhook.ConfigSource{Reader: cache, Name: fencev1alpha1.DefaultConfigName}
	mux := http.NewServeMux()
	noRecover := false
	mux.Handle(webhook.CiliumEgressPath, &admission.Webhook{RecoverPanic: &noRecover, Handler: &webhook.CiliumHandler{
		Config: src, Owners: &webhook.CachedOwners{Cache: cache, Live: cache}, LookupTimeout: time.Second,
	}})
	return mux
}

func review(t testing.TB, req admission.Request) []byte {
	ar := admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: &req.AdmissionRequest}
	b, err := json.Marshal(ar)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzAdmissionReview posts arbitrary bytes to the webhook's path: the webhook must
// never panic and must always answer with an AdmissionReview carrying a
// response (a refusal of garbage included).
func FuzzAdmissionReview(f *testing.F) {
	claim := tst.MakeClaim("a").Obj()
	cnp := tst.MakeCNP(claim).Obj()
	f.Add(review(f, cnpRequest(f, admissionv1.Create, tst.HostUser, nil, cnp)))
	f.Add(review(f, cnpRequest(f, admissionv1.Update, tst.HostUser, cnp, tst.MakeCNP(claim).OwnedBy(claim).Obj())))
	f.Add(review(f, cnpRequest(f, admissionv1.Create, tst.HostUser, nil, tst.MakeCNP(claim).Set(int64(3), "metadata", "ownerReferences").Obj())))
	f.Add(review(f, cnpRequest(f, admissionv1.Delete, tst.HostUser, cnp, nil)))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","kind":{"group":"cilium.io","kind":"CiliumNetworkPolicy"},"operation":"CREATE","userInfo":{"username":"` + tst.HostUser + `"},"object":{"metadata":{"ownerReferences":[{"apiVersion":"agents.x-k8s.io/v1beta1","kind":"Sandbox","name":"s","uid":null}]}}}}`))
	f.Add([]byte(`{"request":{"object":[]}}`))
	f.Add([]byte(`{`))
	f.Add([]byte(``))

	srv := fuzzServer(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, path := range []string{webhook.CiliumEgressPath} {
			r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			srv.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				t.Fatalf("%s: HTTP %d, want 200 with an AdmissionReview", path, w.Code)
			}
			var out admissionv1.AdmissionReview
			if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || out.Response == nil {
				t.Fatalf("%s: no AdmissionReview response (%v): %q", path, err, w.Body.String())
			}
			if len(out.Response.Patch) > 0 {
				t.Fatalf("%s: the webhook returned a patch; it must never mutate", path)
			}
			if !out.Response.Allowed && (out.Response.Result == nil || out.Response.Result.Code == 0) {
				t.Fatalf("%s: a refusal without a status code: %+v", path, out.Response)
			}
		}
	})
}
