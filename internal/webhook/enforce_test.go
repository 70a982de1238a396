package webhook_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/sandbox-fence/sandbox-fence/internal/enforcement"
	tst "github.com/sandbox-fence/sandbox-fence/internal/testing"
	"github.com/sandbox-fence/sandbox-fence/internal/webhook"
)

type fixed admission.Response

func (f fixed) Handle(context.Context, admission.Request) admission.Response {
	return admission.Response(f)
}

func refusal(code int32, msg string) fixed {
	return fixed{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{Code: code, Message: msg}}}
}

// enforced is what the API server and kubectl get events would show.
type enforced struct {
	Allowed          bool
	Code             int32
	Warnings         []string
	AuditAnnotations map[string]string
	Events           []string
}

// TestEnforceAppliesTheMode: deny, warn and audit on a rule's
// refusal, a fail-closed error and an admission with a warning.
func TestEnforceAppliesTheMode(t *testing.T) {
	const msg = `cilium-fence: CiliumNetworkPolicy.cilium.io "namzu-sbx-1" is invalid: metadata.ownerReferences[0].name: Not found: "a"`
	const errMsg = `cilium-fence: FenceConfig "sandbox-fence" could not be read (x), so the write was not checked and is refused for now; retry`
	admittedWithWarning := fixed(admission.Allowed("").WithWarnings("cilium-fence: duplicate label"))
	cases := []struct {
		name  string
		mode  enforcement.Mode
		inner fixed
		want  enforced
	}{{
		name: "deny mode keeps the refusal, annotates it and records an Event", mode: enforcement.Deny, inner: refusal(422, msg),
		want: enforced{Code: 422, AuditAnnotations: map[string]string{"violation": msg},
			Events: []string{"Warning FenceDenied CREATE by system:serviceaccount:sbx:sandbox-host refused: " + msg}},
	}, {
		name: "warn mode admits with the refusal's message as a warning", mode: enforcement.Warn, inner: refusal(422, msg),
		want: enforced{Allowed: true, Code: http.StatusOK, Warnings: []string{msg}, AuditAnnotations: map[string]string{"violation": msg},
			Events: []string{"Warning FenceWarned CREATE by system:serviceaccount:sbx:sandbox-host admitted with a warning; Deny mode would refuse it: " + msg}},
	}, {
		name: "audit mode admits silently but for the audit log and the Event", mode: enforcement.Audit, inner: refusal(422, msg),
		want: enforced{Allowed: true, Code: http.StatusOK, AuditAnnotations: map[string]string{"violation": msg},
			Events: []string{"Warning FenceAudited CREATE by system:serviceaccount:sbx:sandbox-host admitted (audit mode); Deny mode would refuse it: " + msg}},
	}, {
		name: "warn mode admits a fail-closed error too: observing never refuses", mode: enforcement.Warn, inner: refusal(500, errMsg),
		want: enforced{Allowed: true, Code: http.StatusOK, Warnings: []string{errMsg}, AuditAnnotations: map[string]string{"violation": errMsg},
			Events: []string{"Warning FenceWarned CREATE by system:serviceaccount:sbx:sandbox-host admitted with a warning; Deny mode would refuse it: " + errMsg}},
	}, {
		name: "deny mode keeps a fail-closed error's 500", mode: enforcement.Deny, inner: refusal(500, errMsg),
		want: enforced{Code: 500, AuditAnnotations: map[string]string{"violation": errMsg},
			Events: []string{"Warning FenceDenied CREATE by system:serviceaccount:sbx:sandbox-host refused: " + errMsg}},
	}, {
		name: "an admission is passed on as it is, in every mode", mode: enforcement.Audit, inner: admittedWithWarning,
		want: enforced{Allowed: true, Code: http.StatusOK, Warnings: []string{"cilium-fence: duplicate label"}},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := record.NewFakeRecorder(10)
			e := &webhook.Enforce{Handler: tc.inner, Mode: tc.mode, Recorder: rec, Kind: "CiliumNetworkPolicy", APIVersion: "cilium.io/v2"}
			resp := e.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
				Operation: admissionv1.Create, Namespace: "sbx", Name: "namzu-sbx-1",
				UserInfo: authnv1.UserInfo{Username: "system:serviceaccount:sbx:sandbox-host"},
			}})
			close(rec.Events)
			got := enforced{Allowed: resp.Allowed, Warnings: resp.Warnings, AuditAnnotations: resp.AuditAnnotations}
			if resp.Result != nil {
				got.Code = resp.Result.Code
			}
			for ev := range rec.Events {
				got.Events = append(got.Events, ev)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// TestDecisionsNamespaceLabelIsBounded sends decisions from more namespaces
// than the bound: the first MaxNamespaceLabels keep their names, the rest
// count under OtherNamespace, so a flood of crafted requests cannot grow
// the scrape.
func TestDecisionsNamespaceLabelIsBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := &webhook.CiliumHandler{Metrics: webhook.NewMetrics(reg)}
	const sent = webhook.MaxNamespaceLabels + 10
	for i := range sent {
		req := cnpRequest(t, admissionv1.Create, "alice", nil, tst.MakeCNP(tst.MakeClaim("a").Obj()).Obj())
		req.Namespace = fmt.Sprintf("ns-%03d", i)
		h.Handle(context.Background(), req)
	}
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != webhook.DecisionsMetric {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "namespace" {
					got[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	if len(got) != webhook.MaxNamespaceLabels+1 || got[webhook.OtherNamespace] != 10 || got["ns-000"] != 1 || got[fmt.Sprintf("ns-%03d", webhook.MaxNamespaceLabels-1)] != 1 {
		t.Errorf("namespace labels: %d distinct, %v under %s; want %d distinct and 10 under it", len(got), got[webhook.OtherNamespace], webhook.OtherNamespace, webhook.MaxNamespaceLabels+1)
	}
}
