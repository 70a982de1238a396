package fence

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clocktesting "k8s.io/utils/clock/testing"
)

var testClock = clocktesting.NewFakePassiveClock(time.Date(2026, 8, 1, 9, 0, 0, 0, time.UTC))

const sandboxPath = "/apis/agents.x-k8s.io/v1beta1/namespaces/ns/sandboxes/a"

// newHarness stores the given Sandbox as ns/a and returns a Client on it.
func newHarness(t *testing.T, sb *sandboxBuilder) (*fakeAPI, *Client) {
	t.Helper()
	f, dyn := newFakeAPI(t)
	if sb != nil {
		f.put("sandboxes", sb.Obj())
	}
	return f, NewClient(dyn, Options{Clock: testClock})
}

func storedEpoch(f *fakeAPI) string {
	return f.get("sandboxes", "ns", "a").GetAnnotations()[AnnotationHolderEpoch]
}

// raiseEpoch is a concurrent host taking the workspace over.
func raiseEpoch(to string) func(f *fakeAPI, r request) reply {
	return func(f *fakeAPI, r request) reply {
		f.touch(sandboxPath, func(u *unstructured.Unstructured) {
			a := u.GetAnnotations()
			if a == nil {
				a = map[string]string{}
			}
			a[AnnotationHolderEpoch] = to
			u.SetAnnotations(a)
		})
		return reply{}
	}
}

// call runs a mode write on ns/a.
func call(write func(*Client, context.Context, string, string, WriteOptions) (*unstructured.Unstructured, error), epoch *uint64) func(c *Client) error {
	return func(c *Client) error {
		_, err := write(c, context.Background(), "ns", "a", WriteOptions{Epoch: epoch})
		return err
	}
}

func TestClientSendsTheSpecBodies(t *testing.T) {
	template := map[string]any{"spec": map[string]any{"nodeSelector": map[string]any{"9": "b", "10": "a", "a": "c"}}}
	tests := []struct {
		name        string
		sandbox     *sandboxBuilder
		run         func(c *Client) error
		contentType string
		want        string
	}{
		{
			name:        "a fenced suspend sends the steady-state patch",
			sandbox:     makeSandbox("a").Epoch("2"),
			run:         call((*Client).Suspend, new(uint64(2))),
			contentType: "application/json-patch+json",
			want:        specSteadyStateSuspend,
		},
		{
			name:        "a fenced suspend of an object without annotations sends the migration patch",
			sandbox:     makeSandbox("a").RV("1001"),
			run:         call((*Client).Suspend, new(uint64(3))),
			contentType: "application/json-patch+json",
			want:        specMigration,
		},
		{
			name:        "an unfenced suspend sends the unfenced merge patch",
			sandbox:     makeSandbox("a").Epoch("7"),
			run:         call((*Client).Suspend, nil),
			contentType: "application/merge-patch+json",
			want:        `{"metadata":{"annotations":{"sandbox.namzu.ai/operating-mode-changed-at":"2026-08-01T09:00:00.000Z"}},"spec":{"operatingMode":"Suspended"}}`,
		},
		{
			name:        "a fenced resume raises the epoch",
			sandbox:     makeSandbox("a").Epoch("2").Mode(ModeSuspended),
			run:         call((*Client).Resume, new(uint64(4))),
			contentType: "application/json-patch+json",
			want: `[{"op":"test","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"2"},
 {"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"4"},
 {"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1operating-mode-changed-at","value":"2026-08-01T09:00:00.000Z"},
 {"op":"add","path":"/spec/operatingMode","value":"Running"}]`,
		},
		{
			name:    "a stamp sends the epoch alone",
			sandbox: makeSandbox("a").Epoch("2"),
			run: func(c *Client) error {
				_, err := c.Stamp(context.Background(), "ns", "a", WriteOptions{Epoch: new(uint64(3))})
				return err
			},
			contentType: "application/json-patch+json",
			want: `[{"op":"test","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"2"},
 {"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"3"}]`,
		},
		{
			name:    "a fenced refresh sends the refresh patch with the template's hash",
			sandbox: makeSandbox("a").Epoch("4").Mode(ModeSuspended),
			run: func(c *Client) error {
				_, err := c.RefreshTemplate(context.Background(), "ns", "a", template, WriteOptions{Epoch: new(uint64(4))})
				return err
			},
			contentType: "application/json-patch+json",
			want: `[{"op":"test","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"4"},
 {"op":"test","path":"/spec/operatingMode","value":"Suspended"},
 {"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"4"},
 {"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1operating-mode-changed-at","value":"2026-08-01T09:00:00.000Z"},
 {"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1pod-template-hash","value":"sha256:82a444e63998d49fe84f66cfff11f30bb4507540b445d30dca81df306912f5b9"},
 {"op":"add","path":"/spec/podTemplate","value":{"spec":{"nodeSelector":{"10":"a","9":"b","a":"c"}}}},
 {"op":"add","path":"/spec/operatingMode","value":"Running"}]`,
		},
		{
			name:    "a fenced create annotates the epoch and the template hash",
			sandbox: nil,
			run: func(c *Client) error {
				sb := makeSandbox("a").Obj()
				unstructured.SetNestedField(sb.Object, template, "spec", "podTemplate")
				_, err := c.CreateWorkspace(context.Background(), sb, WriteOptions{Epoch: new(uint64(1))})
				return err
			},
			contentType: "application/json",
			want:        `{"apiVersion":"agents.x-k8s.io/v1beta1","kind":"Sandbox","metadata":{"annotations":{"sandbox.namzu.ai/holder-epoch":"1","sandbox.namzu.ai/pod-template-hash":"sha256:82a444e63998d49fe84f66cfff11f30bb4507540b445d30dca81df306912f5b9"},"name":"a","namespace":"ns"},"spec":{"operatingMode":"Running","podTemplate":{"spec":{"nodeSelector":{"10":"a","9":"b","a":"c"}}}}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, c := newHarness(t, tt.sandbox)
			if err := tt.run(c); err != nil {
				t.Fatal(err)
			}
			writes := append(f.sent(http.MethodPatch), f.sent(http.MethodPost)...)
			if len(writes) != 1 {
				t.Fatalf("sent %d writes, want 1: %+v", len(writes), writes)
			}
			if writes[0].ContentType != tt.contentType {
				t.Errorf("Content-Type %q, want %q", writes[0].ContentType, tt.contentType)
			}
			if diff := cmp.Diff(compact(t, tt.want), strings.TrimSpace(writes[0].Body)); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}
}

func TestClientWriteErrors(t *testing.T) {
	suspend := func(epoch uint64) func(c *Client) error { return call((*Client).Suspend, &epoch) }
	tests := []struct {
		name      string
		sandbox   *sandboxBuilder
		hooks     func(f *fakeAPI)
		run       func(c *Client) error
		wantIs    error
		wantAs    func(t *testing.T, err error)
		denial    *AdmissionDeniedError // the error's parse
		patches   int
		wantEpoch string
	}{
		{
			name:    "a stale epoch is refused locally, sending nothing",
			sandbox: makeSandbox("a").Epoch("5"),
			run:     suspend(3),
			wantIs:  ErrStaleEpoch,
			wantAs: func(t *testing.T, err error) {
				var se *StaleEpochError
				if !errors.As(err, &se) || se.Stored != 5 || se.Held != 3 {
					t.Errorf("error %v does not carry stored 5 and held 3", err)
				}
			},
			patches: 0, wantEpoch: "5",
		},
		{
			name:    "an unreadable epoch is refused locally, sending nothing",
			sandbox: makeSandbox("a").Epoch("05"),
			run:     suspend(9),
			wantIs:  ErrUnreadableEpoch,
			patches: 0, wantEpoch: "05",
		},
		{
			name:    "a failed test op is retried from a fresh read once the object moved",
			sandbox: makeSandbox("a").Epoch("1"),
			hooks:   func(f *fakeAPI) { f.on(http.MethodPatch, "sandboxes", 1, raiseEpoch("2")) },
			run:     suspend(3),
			patches: 2, wantEpoch: "3",
		},
		{
			name:    "a retry re-checks the epoch and refuses once another host raised it past ours",
			sandbox: makeSandbox("a").Epoch("1"),
			hooks:   func(f *fakeAPI) { f.on(http.MethodPatch, "sandboxes", 1, raiseEpoch("4")) },
			run:     suspend(3),
			wantIs:  ErrStaleEpoch,
			patches: 1, wantEpoch: "4",
		},
		{
			name:    "a 422 on an object that did not move stands",
			sandbox: makeSandbox("a").Epoch("1"),
			hooks: func(f *fakeAPI) {
				f.on(http.MethodPatch, "sandboxes", 1, func(*fakeAPI, request) reply {
					return status(http.StatusUnprocessableEntity, "Invalid", genericInvalid)
				})
			},
			run:     suspend(3),
			wantIs:  ErrPatchNotApplied,
			patches: 1, wantEpoch: "1",
		},
		{
			name:    "an object that keeps moving gets three attempts",
			sandbox: makeSandbox("a").Epoch("1"),
			hooks: func(f *fakeAPI) {
				for _, e := range []string{"2", "3", "4"} {
					f.on(http.MethodPatch, "sandboxes", 1, raiseEpoch(e))
				}
			},
			run:     suspend(9),
			wantIs:  ErrPatchNotApplied,
			patches: 3, wantEpoch: "4",
		},
		{
			name:    "a ValidatingAdmissionPolicy denial is parsed and not retried",
			sandbox: makeSandbox("a").Epoch("1"),
			hooks: func(f *fakeAPI) {
				f.on(http.MethodPatch, "sandboxes", 1, func(*fakeAPI, request) reply {
					return status(http.StatusUnprocessableEntity, "Invalid", `sandboxes.agents.x-k8s.io "a" is invalid: : ValidatingAdmissionPolicy 'sandbox-fence-holder-epoch' with binding 'sandbox-fence-holder-epoch-binding' denied request: holder-epoch: metadata.annotations[sandbox.namzu.ai/holder-epoch]: "2" is below the stored "3"`)
				})
			},
			run: suspend(3),
			denial: &AdmissionDeniedError{Code: 422, Policy: "sandbox-fence-holder-epoch", Binding: "sandbox-fence-holder-epoch-binding",
				Message: `holder-epoch: metadata.annotations[sandbox.namzu.ai/holder-epoch]: "2" is below the stored "3"`},
			patches: 1, wantEpoch: "1",
		},
		{
			name:    "a webhook denial is parsed, whatever its code",
			sandbox: makeSandbox("a").Epoch("1"),
			hooks: func(f *fakeAPI) {
				f.on(http.MethodPatch, "sandboxes", 1, func(*fakeAPI, request) reply {
					return status(http.StatusForbidden, "Forbidden", `admission webhook "sandboxes.fence.sandbox.namzu.ai" denied the request: holder-epoch: strict delete`)
				})
			},
			run:     suspend(3),
			denial:  &AdmissionDeniedError{Code: 403, Webhook: "sandboxes.fence.sandbox.namzu.ai", Message: "holder-epoch: strict delete"},
			patches: 1, wantEpoch: "1",
		},
		{
			name:    "a missing sandbox is gone",
			sandbox: nil,
			run:     suspend(3),
			wantIs:  ErrGone,
		},
		{
			name:    "a refresh of a running workspace is refused locally",
			sandbox: makeSandbox("a").Epoch("1"),
			run: func(c *Client) error {
				_, err := c.RefreshTemplate(context.Background(), "ns", "a", map[string]any{}, WriteOptions{Epoch: new(uint64(1))})
				return err
			},
			wantIs:  ErrPatchNotApplied,
			patches: 0, wantEpoch: "1",
		},
		{
			name:    "an unfenced write applies over another host's epoch and keeps it",
			sandbox: makeSandbox("a").Epoch("9"),
			run:     call((*Client).Resume, nil),
			patches: 1, wantEpoch: "9",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, c := newHarness(t, tt.sandbox)
			if tt.hooks != nil {
				tt.hooks(f)
			}
			err := tt.run(c)
			if tt.wantIs == nil && tt.wantAs == nil && tt.denial == nil && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %v, want one matching %v", err, tt.wantIs)
			}
			if tt.wantAs != nil {
				tt.wantAs(t, err)
			}
			if tt.denial != nil {
				var d *AdmissionDeniedError
				if !errors.As(err, &d) {
					t.Fatalf("error %v is no AdmissionDeniedError", err)
				}
				if diff := cmp.Diff(*tt.denial, *d, cmpIgnoreErr); diff != "" {
					t.Errorf("denial (-want +got):\n%s", diff)
				}
			}
			if got := len(f.sent(http.MethodPatch)); got != tt.patches {
				t.Errorf("sent %d PATCHes, want %d", got, tt.patches)
			}
			if tt.sandbox != nil {
				if got := storedEpoch(f); got != tt.wantEpoch {
					t.Errorf("stored epoch %q, want %q", got, tt.wantEpoch)
				}
			}
		})
	}
}

func TestAStampWithoutAnEpochIsRefusedSendingNothing(t *testing.T) {
	f, c := newHarness(t, makeSandbox("a").Epoch("2"))
	_, err := c.Stamp(context.Background(), "ns", "a", WriteOptions{})
	if err == nil || !strings.Contains(err.Error(), "an epoch is required") {
		t.Fatalf("Stamp(nil) = %v, want a local refusal saying an epoch is required", err)
	}
	if got := len(f.sent(http.MethodGet)) + len(f.sent(http.MethodPatch)); got != 0 {
		t.Errorf("sent %d requests, want none", got)
	}
}

var cmpIgnoreErr = cmp.FilterPath(func(p cmp.Path) bool { return p.String() == "Err" }, cmp.Ignore())

func TestClientDelete(t *testing.T) {
	tests := []struct {
		name     string
		sandbox  *sandboxBuilder
		hooks    func(f *fakeAPI)
		epoch    *uint64
		wantIs   error
		deletes  int
		wantGone bool
		wantBody string
	}{
		{
			name:     "a fenced delete carries the gate read's resourceVersion",
			sandbox:  makeSandbox("a").RV("1001").Epoch("2"),
			epoch:    new(uint64(2)),
			deletes:  1,
			wantGone: true,
			wantBody: `{"apiVersion":"v1","kind":"DeleteOptions","preconditions":{"resourceVersion":"1001"}}`,
		},
		{
			name:    "a 409 is re-read, re-checked and retried",
			sandbox: makeSandbox("a").Epoch("2"),
			hooks:   func(f *fakeAPI) { f.on(http.MethodDelete, "sandboxes", 1, raiseEpoch("2")) },
			epoch:   new(uint64(2)),
			deletes: 2, wantGone: true,
		},
		{
			name:    "a retry refuses once another host raised the epoch",
			sandbox: makeSandbox("a").Epoch("2"),
			hooks:   func(f *fakeAPI) { f.on(http.MethodDelete, "sandboxes", 1, raiseEpoch("3")) },
			epoch:   new(uint64(2)),
			wantIs:  ErrStaleEpoch,
			deletes: 1,
		},
		{
			name:    "three conflicts in a row give up with ErrConflict",
			sandbox: makeSandbox("a").Epoch("2"),
			hooks:   func(f *fakeAPI) { f.on(http.MethodDelete, "sandboxes", 3, raiseEpoch("2")) },
			epoch:   new(uint64(2)),
			wantIs:  ErrConflict,
			deletes: 3,
		},
		{
			name:    "a stale epoch sends no DELETE",
			sandbox: makeSandbox("a").Epoch("5"),
			epoch:   new(uint64(2)),
			wantIs:  ErrStaleEpoch,
		},
		{
			name:     "a sandbox already gone at the gate read is deleted",
			epoch:    new(uint64(2)),
			wantGone: true,
		},
		{
			name:    "a 410 on the DELETE counts as deleted",
			sandbox: makeSandbox("a").Epoch("2"),
			hooks: func(f *fakeAPI) {
				f.on(http.MethodDelete, "sandboxes", 1, func(*fakeAPI, request) reply { return status(http.StatusGone, "Gone", "gone") })
			},
			epoch:   new(uint64(2)),
			deletes: 1,
		},
		{
			name:    "a 404 on the DELETE counts as deleted",
			sandbox: makeSandbox("a").Epoch("2"),
			hooks: func(f *fakeAPI) {
				f.on(http.MethodDelete, "sandboxes", 1, func(f *fakeAPI, _ request) reply {
					delete(f.objects, sandboxPath)
					return reply{}
				})
			},
			epoch:   new(uint64(2)),
			deletes: 1, wantGone: true,
		},
		{
			name:     "an unfenced delete has no preconditions and ignores epochs",
			sandbox:  makeSandbox("a").Epoch("9"),
			deletes:  1,
			wantGone: true,
			wantBody: `{"apiVersion":"v1","kind":"DeleteOptions"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, c := newHarness(t, tt.sandbox)
			if tt.hooks != nil {
				tt.hooks(f)
			}
			err := c.Delete(context.Background(), "ns", "a", WriteOptions{Epoch: tt.epoch})
			if tt.wantIs == nil && err != nil || tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Fatalf("error %v, want %v", err, tt.wantIs)
			}
			deletes := f.sent(http.MethodDelete)
			if len(deletes) != tt.deletes {
				t.Errorf("sent %d DELETEs, want %d", len(deletes), tt.deletes)
			}
			if gone := f.get("sandboxes", "ns", "a") == nil; gone != tt.wantGone {
				t.Errorf("sandbox gone = %v, want %v", gone, tt.wantGone)
			}
			if tt.wantBody != "" {
				if diff := cmp.Diff(parseJSON(t, tt.wantBody), parseJSON(t, deletes[0].Body)); diff != "" {
					t.Errorf("DELETE body (-want +got):\n%s", diff)
				}
			}
		})
	}
}

const claimPath = "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/ns/sandboxclaims/c"

// makeClaim is the claim "c" (uid uid-c) in ns.
func makeClaim() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
		"metadata": map[string]any{"name": "c", "namespace": "ns", "uid": "uid-c"},
		"spec":     map[string]any{"warmPoolRef": map[string]any{"name": "pool"}},
	}}
}

// ownedByClaim makes the Sandbox the claim owns, as the claim controller's
// adopted one.
func ownedByClaim(b *sandboxBuilder) *sandboxBuilder {
	b.u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "extensions.agents.x-k8s.io/v1beta1", Kind: "SandboxClaim", Name: "c", UID: "uid-c"}})
	return b
}

// Under strict delete a bound host's claim DELETE must carry
// preconditions.resourceVersion; the server cannot see the
// claim's Sandbox, so the client checks that Sandbox's epoch first.
func TestClientDeleteClaim(t *testing.T) {
	tests := []struct {
		name      string
		sandboxes []*sandboxBuilder
		noClaim   bool
		hooks     func(f *fakeAPI)
		epoch     *uint64
		wantIs    error
		deletes   int
		wantGone  bool
		wantBody  string
	}{
		{
			name:      "a fenced claim delete checks the claim's Sandbox and carries the claim read's resourceVersion",
			sandboxes: []*sandboxBuilder{ownedByClaim(makeSandbox("a").Epoch("2"))},
			epoch:     new(uint64(2)),
			deletes:   1, wantGone: true,
			wantBody: `{"apiVersion":"v1","kind":"DeleteOptions","preconditions":{"resourceVersion":"1001"}}`,
		},
		{
			name:      "a claim whose Sandbox a newer holder took sends no DELETE",
			sandboxes: []*sandboxBuilder{ownedByClaim(makeSandbox("a").Epoch("3"))},
			epoch:     new(uint64(2)),
			wantIs:    ErrStaleEpoch,
		},
		{
			name:      "a claim whose Sandbox carries a malformed epoch sends no DELETE",
			sandboxes: []*sandboxBuilder{ownedByClaim(makeSandbox("a").Epoch("01"))},
			epoch:     new(uint64(2)),
			wantIs:    ErrUnreadableEpoch,
		},
		{
			name:      "Sandboxes the claim does not own do not count",
			sandboxes: []*sandboxBuilder{makeSandbox("a").Epoch("9")},
			epoch:     new(uint64(2)),
			deletes:   1, wantGone: true,
		},
		{
			name:    "a claim without a Sandbox yet is deleted with its precondition",
			epoch:   new(uint64(2)),
			deletes: 1, wantGone: true,
			wantBody: `{"apiVersion":"v1","kind":"DeleteOptions","preconditions":{"resourceVersion":"1001"}}`,
		},
		{
			name:      "a 409 is re-read, re-checked and retried",
			sandboxes: []*sandboxBuilder{ownedByClaim(makeSandbox("a").Epoch("2"))},
			hooks: func(f *fakeAPI) {
				f.on(http.MethodDelete, "sandboxclaims", 1, func(f *fakeAPI, _ request) reply {
					f.touch(claimPath, func(*unstructured.Unstructured) {})
					return reply{}
				})
			},
			epoch:   new(uint64(2)),
			deletes: 2, wantGone: true,
		},
		{
			name:      "a retry refuses once another host raised the Sandbox's epoch",
			sandboxes: []*sandboxBuilder{ownedByClaim(makeSandbox("a").Epoch("2"))},
			hooks: func(f *fakeAPI) {
				f.on(http.MethodDelete, "sandboxclaims", 1, func(f *fakeAPI, r request) reply {
					f.touch(claimPath, func(*unstructured.Unstructured) {})
					return raiseEpoch("3")(f, r)
				})
			},
			epoch:   new(uint64(2)),
			wantIs:  ErrStaleEpoch,
			deletes: 1,
		},
		{
			name:     "a claim already gone counts as deleted",
			noClaim:  true,
			epoch:    new(uint64(2)),
			wantGone: true,
		},
		{
			name:      "an unfenced claim delete has no preconditions and reads nothing",
			sandboxes: []*sandboxBuilder{ownedByClaim(makeSandbox("a").Epoch("9"))},
			deletes:   1, wantGone: true,
			wantBody: `{"apiVersion":"v1","kind":"DeleteOptions"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, c := newHarness(t, nil)
			if !tt.noClaim {
				claim := makeClaim()
				claim.SetResourceVersion("1001")
				f.put("sandboxclaims", claim)
			}
			for _, sb := range tt.sandboxes {
				f.put("sandboxes", sb.Obj())
			}
			if tt.hooks != nil {
				tt.hooks(f)
			}
			err := c.DeleteClaim(context.Background(), "ns", "c", WriteOptions{Epoch: tt.epoch})
			if tt.wantIs == nil && err != nil || tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Fatalf("error %v, want %v", err, tt.wantIs)
			}
			deletes := f.sent(http.MethodDelete)
			if len(deletes) != tt.deletes {
				t.Errorf("sent %d DELETEs, want %d", len(deletes), tt.deletes)
			}
			if gone := f.get("sandboxclaims", "ns", "c") == nil; gone != tt.wantGone {
				t.Errorf("claim gone = %v, want %v", gone, tt.wantGone)
			}
			if tt.epoch == nil && len(f.sent(http.MethodGet)) != 0 {
				t.Errorf("an unfenced delete read %d objects, want none", len(f.sent(http.MethodGet)))
			}
			if tt.wantBody != "" {
				if diff := cmp.Diff(parseJSON(t, tt.wantBody), parseJSON(t, deletes[0].Body)); diff != "" {
					t.Errorf("DELETE body (-want +got):\n%s", diff)
				}
			}
		})
	}
}
