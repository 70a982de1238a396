package webhook

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	kjson "sigs.k8s.io/json"
)

// FuzzDecodeOwnerReferencesMatchesDecodeObject holds the narrow decoding of
// the CiliumNetworkPolicy path to the full one it replaced: for any body,
// the same error, and the same owner references as the owner rule reads
// them (Unstructured.GetOwnerReferences, lenient about malformed entries).
// A difference would let a crafted body show the rule other owners than the
// API server stores.
func FuzzDecodeOwnerReferencesMatchesDecodeObject(f *testing.F) {
	for _, s := range []string{
		``, `null`, `[]`, `"x"`, `{`, `{}`, `{"metadata":null}`, `{"metadata":5}`, `{"metadata":{}}`,
		`{"metadata":{"ownerReferences":null}}`, `{"metadata":{"ownerReferences":3}}`, `{"metadata":{"ownerReferences":[3]}}`,
		`{"metadata":{"ownerReferences":[{"apiVersion":"agents.x-k8s.io/v1beta1","kind":"Sandbox","name":"s","uid":"u","controller":true}]},"spec":{"egress":[{"toFQDNs":[{"matchName":"a.b"}]}]}}`,
		`{"metadata":{"ownerReferences":[{"name":"a"}]},"Metadata":{"ownerReferences":[{"name":"b"}]}}`,
		`{"metadata":{"ownerReferences":[{"name":"a"}]},"metadata":{"ownerReferences":[{"name":"b"}]}}`,
		`{"metadata":{"ownerReferences":[{"name":"a"}],"OwnerReferences":[{"name":"b"}]}}`,
		`{"metadata":{"ownerReferences":[{"name":1,"uid":{},"controller":"true"}]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		full, fullErr := decodeObject(raw)
		narrow, narrowErr := decodeOwnerReferences(raw)
		// A number outside float64's range outside metadata fails the full
		// decoding only; the narrow one never converts it. The API server
		// decodes every body with the same decoder before admission and
		// refuses it there, so no review carries one: require that, and
		// nothing more of the narrow decoder.
		var typeErr *json.UnmarshalTypeError
		if narrowErr == nil && errors.As(fullErr, &typeErr) && strings.HasPrefix(typeErr.Value, "number") {
			if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &map[string]any{}); err == nil {
				t.Fatalf("full decoding refused a number in %q (%v) that the API server's decoder accepts", raw, fullErr)
			}
			return
		}
		if (fullErr == nil) != (narrowErr == nil) || (fullErr != nil && fullErr.Error() != narrowErr.Error()) {
			t.Fatalf("errors differ on %q: full %v, narrow %v", raw, fullErr, narrowErr)
		}
		if fullErr != nil {
			return
		}
		full.SetNamespace("ns")
		narrow.SetNamespace("ns")
		if diff := cmp.Diff(full.GetOwnerReferences(), narrow.GetOwnerReferences()); diff != "" {
			t.Fatalf("owner references differ on %q (-full +narrow):\n%s", raw, diff)
		}
	})
}
