package framework

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/rest"
)

const shippedWebhook = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: sandbox-fence-webhook
webhooks:
- name: cilium-egress.fence.sandbox.namzu.ai
  clientConfig:
    service: {name: sandbox-fence-webhook, namespace: sandbox-fence-system, path: /validate-cilium-egress}
  rules:
  - {apiGroups: [cilium.io], apiVersions: [v2], operations: [CREATE, UPDATE], resources: [ciliumnetworkpolicies]}
  namespaceSelector:
    matchLabels: {fence.sandbox.namzu.ai/enabled: "true"}
  failurePolicy: Fail
  sideEffects: None
  admissionReviewVersions: [v1]
`

// The local suite must test the shipped rules: only clientConfig may change.
func TestPointWebhookAtKeepsEverythingButTheClientConfig(t *testing.T) {
	objs, err := DecodeYAML([]byte(shippedWebhook))
	if err != nil {
		t.Fatal(err)
	}
	vwc := objs[0]
	before := vwc.DeepCopy()
	if err := PointWebhookAt(vwc, "https://127.0.0.1:9443/", []byte("CA")); err != nil {
		t.Fatal(err)
	}
	hooks, _, _ := unstructured.NestedSlice(vwc.Object, "webhooks")
	wantClient := map[string]any{"url": "https://127.0.0.1:9443/validate-cilium-egress", "caBundle": base64.StdEncoding.EncodeToString([]byte("CA"))}
	if d := cmp.Diff(wantClient, hooks[0].(map[string]any)["clientConfig"]); d != "" {
		t.Errorf("clientConfig (-want +got):\n%s", d)
	}
	// Everything else is untouched.
	for _, o := range []*unstructured.Unstructured{before, vwc} {
		h, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		delete(h[0].(map[string]any), "clientConfig")
		_ = unstructured.SetNestedSlice(o.Object, h, "webhooks")
	}
	if d := cmp.Diff(before.Object, vwc.Object); d != "" {
		t.Errorf("PointWebhookAt changed more than clientConfig (-before +after):\n%s", d)
	}
}

func TestPointWebhookAtRefusesAWebhookWithoutAServicePath(t *testing.T) {
	objs, err := DecodeYAML([]byte(`{"kind":"ValidatingWebhookConfiguration","metadata":{"name":"x"},"webhooks":[{"name":"a.fence.sandbox.namzu.ai","clientConfig":{"url":"https://elsewhere"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := PointWebhookAt(objs[0], "https://127.0.0.1:1", nil); err == nil {
		t.Fatal("want an error for a webhook with no service path to keep")
	}
}

func TestSplitOrdersNamespacesFirstAndHoldsBackWebhookConfigurations(t *testing.T) {
	objs, err := DecodeYAML([]byte(`kind: ServiceAccount
metadata: {name: sa, namespace: ns}
---
kind: ValidatingWebhookConfiguration
metadata: {name: vwc}
---
kind: CustomResourceDefinition
metadata: {name: crd}
---
kind: Namespace
metadata: {name: ns}
---
`))
	if err != nil {
		t.Fatal(err)
	}
	crds, vwcs, rest := (&Bundle{Objects: objs}).Split()
	names := func(us []*unstructured.Unstructured) []string {
		var out []string
		for _, u := range us {
			out = append(out, u.GetKind()+"/"+u.GetName())
		}
		return out
	}
	got := [][]string{names(crds), names(vwcs), names(rest)}
	want := [][]string{{"CustomResourceDefinition/crd"}, {"ValidatingWebhookConfiguration/vwc"}, {"Namespace/ns", "ServiceAccount/sa"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("split (-want +got):\n%s", d)
	}
}

func TestVerdictTellsAdmissionDenialsFromOtherRefusals(t *testing.T) {
	gk := schema.GroupKind{Group: "agents.x-k8s.io", Kind: "Sandbox"}
	vap := apierrors.NewInvalid(gk, "a", field.ErrorList{field.Invalid(field.NewPath(""), "", "ValidatingAdmissionPolicy 'sandbox-fence-holder-epoch' with binding 'sandbox-fence-holder-epoch-binding' denied request: holder-epoch: lowered")})
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "sandboxes"}, "a", nil)
	type summary struct {
		Admitted bool
		Code     int32
		By       string
	}
	tests := []struct {
		name string
		err  error
		want summary
	}{
		{name: "no error is admitted", err: nil, want: summary{Admitted: true}},
		{name: "a policy denial names the policy", err: vap, want: summary{Code: 422, By: "sandbox-fence-holder-epoch"}},
		{name: "an RBAC refusal names no admission", err: forbidden, want: summary{Code: 403}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := VerdictOf(tc.err)
			if d := cmp.Diff(tc.want, summary{v.Admitted, v.Code, v.By}); d != "" {
				t.Errorf("verdict (-want +got):\n%s", d)
			}
		})
	}
	if err := VerdictOf(vap).DeniedBy(PolicyHolderEpoch, "holder-epoch:"); err != nil {
		t.Errorf("DeniedBy on the policy's own denial: %v", err)
	}
	if err := VerdictOf(forbidden).DeniedBy(PolicyHolderEpoch); err == nil {
		t.Error("DeniedBy accepted an RBAC refusal as an admission denial")
	}
}

func TestEpochDecreaseDenialReadsBothEpochsFromThePolicysOwnDenial(t *testing.T) {
	status := func(code int32, msg string) error {
		return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: code, Message: msg}}
	}
	const denial = `sandboxes.agents.x-k8s.io "a" is invalid: ValidatingAdmissionPolicy 'sandbox-fence-holder-epoch' with binding 'sandbox-fence-holder-epoch-binding' denied request: holder-epoch: metadata.annotations[sandbox.namzu.ai/holder-epoch]: epoch may not decrease from "12" to "3"; a newer holder owns this workspace: re-read it and stop writing`
	type got struct {
		Stored, Sent uint64
		OK           bool
	}
	tests := []struct {
		name string
		err  error
		want got
	}{
		{"the policy's 422 names the stored and the sent epoch", status(422, denial), got{12, 3, true}},
		{"the same text with another status code is not the policy's denial", status(403, denial), got{}},
		{"another policy's denial is not it", status(422, strings.Replace(denial, "'sandbox-fence-holder-epoch'", "'other'", 1)), got{}},
		{"another rule of the policy is not it", status(422, strings.Replace(denial, "epoch may not decrease from", "new value", 1)), got{}},
		{"a failed test clause is not it", status(422, `the server rejected our request due to an error in our request: test operation failed`), got{}},
		{"no error is not it", nil, got{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, n, ok := EpochDecreaseDenial(tt.err)
			if d := cmp.Diff(tt.want, got{s, n, ok}); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// The install step refuses a cluster older than the oldest supported
// release before it installs anything, and a server that is not the release
// the provider started.
func TestCheckServerVersionRefusesAClusterBelowTheMinimum(t *testing.T) {
	tests := []struct {
		name, server, want, wantErr string
	}{
		{"the minimum release installs", "v1.33.0", "", ""},
		{"the pinned release installs", "v1.37.2", "v1.37.2", ""},
		{"a release below the minimum is refused", "v1.32.13", "", "not installing sandbox-fence: Kubernetes v1.32.13 is older than v1.33.0, the oldest release sandbox-fence supports (docs/install.md)"},
		{"another release than the one started is refused", "v1.37.2", "v1.33.13", "the server reports Kubernetes v1.37.2, want v1.33.13"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/version" {
					http.NotFound(w, r)
					return
				}
				_ = json.NewEncoder(w).Encode(map[string]string{"gitVersion": tt.server, "major": "1"})
			}))
			defer srv.Close()
			admin, err := NewIdentity(ContextAdmin, "admin", nil, &rest.Config{Host: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			err = (&Env{Admin: admin}).CheckServerVersion(t.Context(), tt.want, func(string, ...any) {})
			got := ""
			if err != nil {
				got = err.Error()
			}
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && !strings.Contains(got, tt.wantErr) {
				t.Errorf("CheckServerVersion = %q, want %q", got, tt.wantErr)
			}
		})
	}
}

func TestControlPlaneChoosesTheBinariesOfKubernetesVersion(t *testing.T) {
	root := t.TempDir()
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, path), []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("hack/tools/kubernetes/go.mod", "module x\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes v1.37.2\n")
	write("bin/k8s/v1.33.13/kube-apiserver", "")
	tests := []struct {
		name, version, wantDir, wantVersion, wantErr string
	}{
		{"unset: the pinned release in bin", "", "bin", "v1.37.2", ""},
		{"the pinned release: bin", "v1.37.2", "bin", "v1.37.2", ""},
		{"another built release: its own directory", "v1.33.13", "bin/k8s/v1.33.13", "v1.33.13", ""},
		{"a release not built yet: an error naming the make command", "v1.34.1", "", "", "run `make tools KUBERNETES_VERSION=v1.34.1` first"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvKubernetesVersion, tt.version)
			dir, v, err := ControlPlane(root)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ControlPlane: %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff([]string{filepath.Join(root, tt.wantDir), tt.wantVersion}, []string{dir, v}); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}
