package policies_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/sandbox-fence/sandbox-fence/internal/vapeval"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// benchRequests are the writes a host sends most, as the plugin sees them:
// the namespace, user and FenceConfig are those of policies/testdata.
func benchRequests(b *testing.B) map[string]vapeval.Request {
	b.Helper()
	const ns, host = "sbx", "system:serviceaccount:sbx:sandbox-host"
	sandboxGVK := schema.GroupVersionKind{Group: "agents.x-k8s.io", Version: "v1beta1", Kind: "Sandbox"}
	sandboxGVR := schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}
	cnpGVK := schema.GroupVersionKind{Group: "cilium.io", Version: "v2", Kind: "CiliumNetworkPolicy"}
	cnpGVR := schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumnetworkpolicies"}
	hostUser := &user.DefaultInfo{Name: host, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:sbx", "system:authenticated"}}

	sandbox := func(epoch, mode string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
			"metadata": map[string]any{"name": "ws", "namespace": ns, "resourceVersion": "1001", "annotations": map[string]any{
				fence.AnnotationHolderEpoch:                  epoch,
				fence.AnnotationPodTemplateHash:              "sha256:83ff99a5673c470fbc66985bf98cf2f31440e270490233b4dea493daa38a6e03",
				"sandbox.namzu.ai/operating-mode-changed-at": "2026-08-01T09:00:00.000Z",
			}},
			"spec": map[string]any{"operatingMode": mode, "podTemplate": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"sandbox.namzu.ai/template": "namzu-workspace"}},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "main", "image": "namzu/agent:1"}}},
			}},
		}}
		return u
	}
	cnp, err := fence.BuildPerSandboxPolicy(fence.PolicyInput{
		Owner:     fence.PolicyOwner{Kind: "SandboxClaim", Name: "claim-a", UID: "6f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"},
		Namespace: ns,
		Hosts:     []string{"registry.npmjs.org", "api.example.com", ".example.org", "github.com", ".githubusercontent.com"},
	})
	if err != nil {
		b.Fatal(err)
	}
	return map[string]vapeval.Request{
		"sandbox fenced suspend (UPDATE)": {
			Operation: admission.Update, Kind: sandboxGVK, Resource: sandboxGVR, Namespace: ns, Name: "ws",
			Object: sandbox("3", "Suspended"), OldObject: sandbox("2", "Running"), User: hostUser,
		},
		"sandbox create": {
			Operation: admission.Create, Kind: sandboxGVK, Resource: sandboxGVR, Namespace: ns, Name: "ws",
			Object: sandbox("1", "Running"), User: hostUser,
		},
		"per-sandbox policy create": {
			Operation: admission.Create, Kind: cnpGVK, Resource: cnpGVR, Namespace: ns, Name: cnp.GetName(),
			Object: cnp, User: hostUser,
		},
		// The control: no policy matches it, so this is the cost of
		// matching alone, which every write in the cluster pays.
		"unrelated ConfigMap create": {
			Operation: admission.Create, Kind: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespace: ns, Name: "settings",
			Object: &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]any{"name": "settings", "namespace": ns},
				"data":     map[string]any{"settings.json": "{}"},
			}},
			User: hostUser,
		},
		"per-sandbox policy delete": {
			Operation: admission.Delete, Kind: cnpGVK, Resource: cnpGVR, Namespace: ns, Name: cnp.GetName(),
			OldObject: cnp, User: hostUser,
		},
	}
}

// BenchmarkVAPs runs each request through the apiserver's own validating
// admission policy plugin with the whole shipped bundle bound (matching,
// params, namespace lookup, CEL, messages): ns/op is the admission time the
// policies add to that request in the apiserver. It also reports the CEL
// cost the server charges: the sum over the expressions that run, and the
// largest single expression as a share of the per-call limit.
func BenchmarkVAPs(b *testing.B) {
	ctx := context.Background()
	bundle, params, nss := benchBundle(b)
	h, err := vapeval.Start(ctx, vapeval.Env{Policies: bundle, Params: []*unstructured.Unstructured{params}, Namespaces: nss, Resources: vapeval.Resources})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Stop()
	nsByName := map[string]*corev1.Namespace{}
	for _, ns := range nss {
		nsByName[ns.Name] = ns
	}
	for name, req := range benchRequests(b) {
		b.Run(name, func(b *testing.B) {
			if err := h.Validate(ctx, req); err != nil {
				b.Fatalf("the host's write must be admitted: %v", err)
			}
			total, worst := celCost(b, bundle, req, params, nsByName[req.Namespace])
			b.ReportAllocs()
			for b.Loop() {
				if err := h.Validate(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(total), "cel-cost/op")
			b.ReportMetric(100*float64(worst)/float64(vapeval.PerCallLimit), "max-expr-%-of-limit")
		})
	}
}

// celCost is the CEL cost the apiserver charges for r: every matchCondition,
// then every validation with the variables each reads evaluated once per
// request, as the plugin memoizes them. The validations are compiled as one
// conjunction so that a variable read by several of them is charged once
// (for an admitted request every validation runs, so the conjunction
// evaluates them all). worst is the costliest single expression.
func celCost(b *testing.B, bundle []*vapeval.PolicyDir, r vapeval.Request, params *unstructured.Unstructured, ns *corev1.Namespace) (total, worst int64) {
	b.Helper()
	ctx := context.Background()
	for _, p := range bundle {
		if !matches(p.Policy, r) {
			continue
		}
		var pr runtime.Object
		if p.Policy.Spec.ParamKind != nil {
			pr = params
		}
		exprs, err := vapeval.CompileExpressions(p.Policy)
		if err != nil {
			b.Fatal(err)
		}
		matched := true
		for _, e := range exprs {
			ev := e.Evaluate(ctx, r, pr, ns)
			if e.Kind == "matchCondition" {
				total += ev.Cost
				matched = matched && ev.Value == true
			}
			if e.Kind != "messageExpression" {
				worst = max(worst, ev.Cost)
			}
		}
		if !matched {
			continue
		}
		conj := p.Policy.DeepCopy()
		var parts []string
		for _, v := range conj.Spec.Validations {
			parts = append(parts, "("+v.Expression+")")
		}
		conj.Spec.Validations = []admissionregistrationv1.Validation{{Expression: strings.Join(parts, " && ")}}
		conj.Spec.MatchConditions = nil
		all, err := vapeval.CompileExpressions(conj)
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range all {
			if e.Kind == "validation" {
				ev := e.Evaluate(ctx, r, pr, ns)
				if ev.Err != nil || ev.Value != true {
					b.Fatalf("%s: the validations of an admitted request = %v, %v", p.Policy.Name, ev.Value, ev.Err)
				}
				total += ev.Cost
			}
		}
	}
	return total, worst
}

// benchBundle loads what policies_test.go's helpers load, for a *testing.B.
func benchBundle(b *testing.B) ([]*vapeval.PolicyDir, *unstructured.Unstructured, []*corev1.Namespace) {
	b.Helper()
	matches, err := filepath.Glob("*/policy.yaml")
	if err != nil || len(matches) == 0 {
		b.Fatalf("no policies/*/policy.yaml: %v", err)
	}
	var bundle []*vapeval.PolicyDir
	for _, m := range matches {
		p, err := vapeval.LoadPolicyDir(filepath.Dir(m))
		if err != nil {
			b.Fatal(err)
		}
		bundle = append(bundle, p)
	}
	objs, err := vapeval.LoadObjects("testdata/fenceconfig.yaml")
	if err != nil || len(objs) != 1 {
		b.Fatalf("testdata/fenceconfig.yaml: want one FenceConfig: %v", err)
	}
	nsObjs, err := vapeval.LoadObjects("testdata/namespaces.yaml")
	if err != nil {
		b.Fatal(err)
	}
	var nss []*corev1.Namespace
	for _, o := range nsObjs {
		ns := &corev1.Namespace{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, ns); err != nil {
			b.Fatal(err)
		}
		nss = append(nss, ns)
	}
	return bundle, objs[0], nss
}
