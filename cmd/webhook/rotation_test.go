package main

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"
)

// TestRotationListsAndWatchesOnlyItsOwnObjects sends, through the
// rotation's narrowed configuration, the requests cert-controller's
// informers and writer send, and records the field selector the server
// receives: lists and watches of the Secret and webhook configuration
// collections are narrowed to the one name RBAC grants, nothing else is
// touched.
func TestRotationListsAndWatchesOnlyItsOwnObjects(t *testing.T) {
	got := map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got[r.Method+" "+r.URL.Path] = r.URL.Query().Get("fieldSelector")
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	for _, prefix := range []string{"", "/k8s/clusters/c-1"} {
		clear(got)
		cfg := narrowedConfig(&rest.Config{Host: srv.URL + prefix}, rotationCollections("sandbox-fence-system", "sandbox-fence-webhook-cert", "sandbox-fence-webhook"))
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		send := func(method, path string, q url.Values) {
			req, err := http.NewRequest(method, srv.URL+prefix+path+"?"+q.Encode(), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		send(http.MethodGet, "/api/v1/namespaces/sandbox-fence-system/secrets", url.Values{"limit": {"500"}})
		send(http.MethodGet, "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", url.Values{"watch": {"true"}, "fieldSelector": {"a=b"}})
		send(http.MethodPut, "/api/v1/namespaces/sandbox-fence-system/secrets/sandbox-fence-webhook-cert", nil)
		send(http.MethodGet, "/api/v1/namespaces/other/secrets", nil)
		send(http.MethodGet, "/api/v1/namespaces/sandbox-fence-system/configmaps", nil)
		want := map[string]string{
			"GET " + prefix + "/api/v1/namespaces/sandbox-fence-system/secrets":                            "metadata.name=sandbox-fence-webhook-cert",
			"GET " + prefix + "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations":      "a=b,metadata.name=sandbox-fence-webhook",
			"PUT " + prefix + "/api/v1/namespaces/sandbox-fence-system/secrets/sandbox-fence-webhook-cert": "",
			"GET " + prefix + "/api/v1/namespaces/other/secrets":                                           "",
			"GET " + prefix + "/api/v1/namespaces/sandbox-fence-system/configmaps":                         "",
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("prefix %q: field selectors the server saw (-want +got):\n%s", prefix, diff)
		}
	}
}
