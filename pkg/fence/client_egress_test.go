package fence

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
)

var claimOwner = PolicyOwner{Kind: OwnerKindSandboxClaim, Name: "claim-1", UID: "0c9a7c6e"}

const policyPath = "/apis/cilium.io/v2/namespaces/ns/ciliumnetworkpolicies/namzu-sbx-0c9a7c6e"

func admissionObject(kind, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("admissionregistration.k8s.io/v1")
	u.SetKind(kind)
	u.SetName(name)
	return u
}

// installFence stores the egress policy and binding under the given names.
func installFence(f *fakeAPI, policy, binding string) {
	if policy != "" {
		f.put("validatingadmissionpolicies", admissionObject("ValidatingAdmissionPolicy", policy))
	}
	if binding != "" {
		f.put("validatingadmissionpolicybindings", admissionObject("ValidatingAdmissionPolicyBinding", binding))
	}
}

func egressInput(hosts ...string) PolicyInput {
	return PolicyInput{Owner: claimOwner, Namespace: "ns", Hosts: hosts}
}

func TestClientApplyEgress(t *testing.T) {
	want, err := BuildPerSandboxPolicy(egressInput("registry.npmjs.org", ".example.com"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		setup   func(f *fakeAPI)
		opts    Options
		wantIs  error
		methods []string // the writes sent, in order
	}{
		{
			name:    "a new policy is POSTed and read back",
			setup:   func(f *fakeAPI) { installFence(f, DefaultEgressPolicyName, DefaultEgressPolicyName+"-binding") },
			methods: []string{http.MethodPost},
		},
		{
			name: "an existing policy is replaced by a merge PATCH of the same full body",
			setup: func(f *fakeAPI) {
				installFence(f, DefaultEgressPolicyName, DefaultEgressPolicyName+"-binding")
				old, _ := BuildPerSandboxPolicy(egressInput("old.example.org"))
				f.put("ciliumnetworkpolicies", old)
			},
			methods: []string{http.MethodPost, http.MethodPatch},
		},
		{
			name:    "configured fence names are the ones checked",
			setup:   func(f *fakeAPI) { installFence(f, "my-fence", "my-binding") },
			opts:    Options{EgressPolicyName: "my-fence", EgressBindingName: "my-binding"},
			methods: []string{http.MethodPost},
		},
		{
			name:   "a missing binding refuses the write before anything is sent",
			setup:  func(f *fakeAPI) { installFence(f, DefaultEgressPolicyName, "") },
			wantIs: ErrFenceNotInstalled,
		},
		{
			name:   "a missing policy refuses the write",
			setup:  func(f *fakeAPI) { installFence(f, "", DefaultEgressPolicyName+"-binding") },
			wantIs: ErrFenceNotInstalled,
		},
		{
			name: "an unreadable policy refuses the write",
			setup: func(f *fakeAPI) {
				installFence(f, DefaultEgressPolicyName, DefaultEgressPolicyName+"-binding")
				f.on(http.MethodGet, "validatingadmissionpolicies", 1, func(*fakeAPI, request) reply {
					return status(http.StatusForbidden, "Forbidden", "forbidden")
				})
			},
			wantIs: ErrFenceNotInstalled,
		},
		{
			name: "a stored policy that differs from the written one is an error",
			setup: func(f *fakeAPI) {
				installFence(f, DefaultEgressPolicyName, DefaultEgressPolicyName+"-binding")
				f.on(http.MethodGet, "ciliumnetworkpolicies", 1, func(f *fakeAPI, _ request) reply {
					f.touch(policyPath, func(u *unstructured.Unstructured) {
						unstructured.SetNestedSlice(u.Object, []any{map[string]any{"toEntities": []any{"world"}}}, "spec", "egress")
					})
					return reply{}
				})
			},
			wantIs:  ErrReadBackMismatch,
			methods: []string{http.MethodPost},
		},
		{
			name: "a merge PATCH that leaves a foreign spec key behind fails the read-back",
			setup: func(f *fakeAPI) {
				installFence(f, DefaultEgressPolicyName, DefaultEgressPolicyName+"-binding")
				old, _ := BuildPerSandboxPolicy(egressInput("old.example.org"))
				unstructured.SetNestedSlice(old.Object, []any{map[string]any{}}, "spec", "ingress")
				f.put("ciliumnetworkpolicies", old)
			},
			wantIs:  ErrReadBackMismatch,
			methods: []string{http.MethodPost, http.MethodPatch},
		},
		{
			name: "an admission denial of the POST is parsed",
			setup: func(f *fakeAPI) {
				installFence(f, DefaultEgressPolicyName, DefaultEgressPolicyName+"-binding")
				f.on(http.MethodPost, "ciliumnetworkpolicies", 1, func(*fakeAPI, request) reply {
					return status(http.StatusUnprocessableEntity, "Invalid", "ValidatingAdmissionPolicy 'sandbox-fence-cilium-egress' with binding 'sandbox-fence-cilium-egress-binding' denied request: cilium-fence: nope")
				})
			},
			methods: []string{http.MethodPost},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, dyn := newFakeAPI(t)
			tt.setup(f)
			c := NewClient(dyn, tt.opts)
			_, err := c.ApplyEgress(context.Background(), egressInput("registry.npmjs.org", ".example.com"))
			var denied *AdmissionDeniedError
			switch {
			case tt.name == "an admission denial of the POST is parsed":
				if !errors.As(err, &denied) || denied.Policy != "sandbox-fence-cilium-egress" || denied.Message != "cilium-fence: nope" {
					t.Fatalf("error %v is not the parsed denial", err)
				}
			case tt.wantIs == nil && err != nil, tt.wantIs != nil && !errors.Is(err, tt.wantIs):
				t.Fatalf("error %v, want %v", err, tt.wantIs)
			}
			var methods []string
			for _, r := range f.requests {
				if r.Method != http.MethodGet {
					methods = append(methods, r.Method)
					if diff := cmp.Diff(roundTrip(want.Object), parseJSON(t, r.Body)); diff != "" {
						t.Errorf("%s body is not the full policy (-want +got):\n%s", r.Method, diff)
					}
				}
			}
			if diff := cmp.Diff(tt.methods, methods); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			if tt.wantIs == nil && denied == nil {
				got := f.get("ciliumnetworkpolicies", "ns", PolicyName(claimOwner.UID))
				if diff := writtenDiff(want, got); diff != "" {
					t.Errorf("stored policy (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestClientCheckEgressFenceIsRemembered(t *testing.T) {
	f, dyn := newFakeAPI(t)
	installFence(f, DefaultEgressPolicyName, DefaultEgressPolicyName+"-binding")
	c := NewClient(dyn, Options{})
	for range 2 {
		if err := c.CheckEgressFence(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(f.sent(http.MethodGet)); got != 2 {
		t.Errorf("sent %d GETs for two checks, want 2 (policy and binding, once)", got)
	}
}

func TestClientRemoveEgress(t *testing.T) {
	f, dyn := newFakeAPI(t)
	p, _ := BuildPerSandboxPolicy(egressInput("a.com"))
	f.put("ciliumnetworkpolicies", p)
	c := NewClient(dyn, Options{})
	for range 2 { // the second DELETE meets a 404, which counts as removed
		if err := c.RemoveEgress(context.Background(), "ns", claimOwner.UID); err != nil {
			t.Fatal(err)
		}
	}
	deletes := f.sent(http.MethodDelete)
	if len(deletes) != 2 || deletes[0].Path != policyPath || f.get("ciliumnetworkpolicies", "ns", p.GetName()) != nil {
		t.Fatalf("deletes %+v did not remove %s", deletes, policyPath)
	}
	// client-go's dynamic client always sends DeleteOptions; an empty one is
	// what the server reads from no body at all.
	if diff := cmp.Diff(parseJSON(t, `{"apiVersion":"v1","kind":"DeleteOptions"}`), parseJSON(t, deletes[0].Body)); diff != "" {
		t.Errorf("DELETE carries options (-want +got):\n%s", diff)
	}
}

// An answer that is no verdict (the webhook's 503 when it
// could not read the owner, the API server's 500 when it could not call
// the webhook, a 429) is repeated until it is one; a verdict (a 422
// denial) is never repeated; and when the attempts run out the caller
// gets the transient answer, which IsTransient tells from a verdict.
func TestClientRetriesTransientAnswersOnly(t *testing.T) {
	const webhookUnavailable = `admission webhook "cilium-egress.fence.sandbox.namzu.ai" denied the request: cilium-fence: ` +
		`metadata.ownerReferences[0].name: Internal error: looking up the SandboxClaim "claim-1" in namespace "ns" timed out ` +
		`(context deadline exceeded), so the owner could not be verified; retry`
	fast := wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 4}
	tests := []struct {
		name          string
		answer        reply
		times         int // how many POSTs get answer
		wantPosts     int
		wantTransient bool
		wantErr       bool
	}{
		{"the webhook's 503 twice, then admitted", status(http.StatusServiceUnavailable, "ServiceUnavailable", webhookUnavailable), 2, 3, false, false},
		{"the API server's 500 failing to call the webhook, then admitted", status(http.StatusInternalServerError, "InternalError",
			`Internal error occurred: failed calling webhook "cilium-egress.fence.sandbox.namzu.ai": connection refused`), 1, 2, false, false},
		{"429 then admitted", status(http.StatusTooManyRequests, "TooManyRequests", "slow down"), 1, 2, false, false},
		{"a 503 on every attempt is returned as transient", status(http.StatusServiceUnavailable, "ServiceUnavailable", webhookUnavailable), 99, 4, true, true},
		{"a 422 denial is final at once", status(http.StatusUnprocessableEntity, "Invalid",
			"ValidatingAdmissionPolicy 'sandbox-fence-cilium-egress' with binding 'sandbox-fence-cilium-egress-binding' denied request: cilium-fence: no"), 99, 1, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, dyn := newFakeAPI(t)
			installFence(f, DefaultEgressPolicyName, DefaultEgressPolicyName+"-binding")
			f.on(http.MethodPost, "ciliumnetworkpolicies", tt.times, func(*fakeAPI, request) reply { return tt.answer })
			_, err := NewClient(dyn, Options{Retry: fast}).ApplyEgress(context.Background(), egressInput("example.com"))
			if (err != nil) != tt.wantErr || IsTransient(err) != tt.wantTransient {
				t.Fatalf("error %v (transient %v), want error %v, transient %v", err, IsTransient(err), tt.wantErr, tt.wantTransient)
			}
			posts := 0
			for _, r := range f.requests {
				if r.Method == http.MethodPost {
					posts++
				}
			}
			if posts != tt.wantPosts {
				t.Errorf("%d POSTs, want %d", posts, tt.wantPosts)
			}
		})
	}
}
