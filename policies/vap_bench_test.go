package policies_test

import (
	"context"
	"fmt"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
// admission policy plugin with the whole bundle bound and the default
// configuration rendered (matching, namespace lookup, CEL, messages, audit
// annotations): ns/op is the admission time the policies add to that
// request in the apiserver. It also reports the CEL cost the server
// charges for it (cel-cost/op: every pass the plugin runs, see
// vapeval.PassCost; cel-validations/op: the match conditions and
// validations alone) and the largest single expression as a share of the
// per-call limit.
func BenchmarkVAPs(b *testing.B) {
	ctx := context.Background()
	config := caseConfig(b, defaultParams(b), vapeval.CaseParams{})
	bundle := vapeval.Rendered(loadBundle(b), config)
	nss := namespaces(b)
	nsByName := map[string]*corev1.Namespace{}
	for _, ns := range nss {
		nsByName[ns.Name] = ns
	}
	reqs := benchRequests(b)
	names := make([]string, 0, len(reqs))
	for name := range reqs {
		names = append(names, name)
	}
	sort.Strings(names)
	h, err := vapeval.Start(ctx, vapeval.Env{Policies: bundle, Namespaces: nss, Resources: vapeval.Resources})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Stop()
	for _, name := range names {
		req := reqs[name]
		b.Run(name, func(b *testing.B) {
			if err := h.Validate(ctx, req); err != nil {
				b.Fatalf("the host's write must be admitted: %v", err)
			}
			cost := celCost(b, bundle, req, nsByName[req.Namespace])
			b.ReportAllocs()
			for b.Loop() {
				if err := h.Validate(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cost.total), "cel-cost/op")
			b.ReportMetric(float64(cost.validations), "cel-validations/op")
			b.ReportMetric(100*float64(cost.worst)/float64(vapeval.PerCallLimit), "max-expr-%-of-limit")
		})
	}
}

// BenchmarkVAPsAtScale is BenchmarkVAPs' per-sandbox policy create under
// larger configurations: the hosts bound (the schema's limit is 64), the
// namespaces each is bound to by list (512 in all hosts' lists at most), and
// the host names of the policy's allowlist; then one host bound by
// namespaceSelector in a cluster of 10 or 10,000 namespaces that the
// selector matches. ns/op and cel-cost/op are what BENCHMARKS.md's scale
// table quotes.
func BenchmarkVAPsAtScale(b *testing.B) {
	const host = "system:serviceaccount:sbx:sandbox-host"
	for _, hosts := range []int{1, 8, 64} {
		for _, bound := range []int{1, 8} {
			for _, names := range []int{1, 8, 32} {
				b.Run(fmt.Sprintf("hosts=%d/namespaces=%d/names=%d", hosts, bound, names), func(b *testing.B) {
					var spec []any
					for i := range hosts {
						user, list := host, []any{"sbx"}
						if i > 0 {
							user, list = fmt.Sprintf("system:serviceaccount:h%d:host", i), []any{fmt.Sprintf("h%d", i)}
						}
						for j := len(list); j < bound; j++ {
							list = append(list, fmt.Sprintf("h%d-%d", i, j))
						}
						spec = append(spec, map[string]any{"username": user, "namespaces": list})
					}
					benchCreateAtScale(b, spec, namespaces(b), names)
				})
			}
		}
	}
	// The selector's label is on sbx and on every other namespace.
	const label = "bench.sandbox.namzu.ai/team"
	for _, count := range []int{10, 10000} {
		b.Run(fmt.Sprintf("selector/namespaces=%d/names=8", count), func(b *testing.B) {
			nss := namespaces(b)
			for _, ns := range nss {
				if ns.Name == "sbx" {
					ns.Labels = map[string]string{label: "agents", "fence.sandbox.namzu.ai/enabled": ns.Labels["fence.sandbox.namzu.ai/enabled"]}
				}
			}
			for i := len(nss); i < count; i++ {
				nss = append(nss, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("team-%05d", i), Labels: map[string]string{label: "agents"}}})
			}
			spec := []any{map[string]any{"username": host, "namespaceSelector": map[string]any{"matchLabels": map[string]any{label: "agents"}}}}
			benchCreateAtScale(b, spec, nss, 8)
		})
	}
}

// benchCreateAtScale runs the host's per-sandbox policy create in sbx, with
// an allowlist of names host names, under the FenceConfig hosts spec and
// the cluster's namespaces nss.
func benchCreateAtScale(b *testing.B, spec []any, nss []*corev1.Namespace, names int) {
	ctx := context.Background()
	config := caseConfig(b, defaultParams(b), vapeval.CaseParams{Spec: map[string]any{"hosts": spec}})
	bundle := vapeval.Rendered(loadBundle(b), config)
	h, err := vapeval.Start(ctx, vapeval.Env{Policies: bundle, Namespaces: nss, Resources: vapeval.Resources})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Stop()
	allow := make([]string, names)
	for i := range allow {
		allow[i] = fmt.Sprintf("api%d.example.com", i)
	}
	cnp, err := fence.BuildPerSandboxPolicy(fence.PolicyInput{
		Owner:     fence.PolicyOwner{Kind: "SandboxClaim", Name: "claim-a", UID: "6f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"},
		Namespace: "sbx", Hosts: allow,
	})
	if err != nil {
		b.Fatal(err)
	}
	req := benchRequests(b)["per-sandbox policy create"]
	req.Object = cnp
	if err := h.Validate(ctx, req); err != nil {
		b.Fatalf("the host's write must be admitted: %v", err)
	}
	var sbx *corev1.Namespace
	for _, ns := range nss {
		if ns.Name == "sbx" {
			sbx = ns
		}
	}
	cost := celCost(b, bundle, req, sbx)
	for b.Loop() {
		if err := h.Validate(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cost.total), "cel-cost/op")
	b.ReportMetric(100*float64(cost.worst)/float64(vapeval.PerCallLimit), "max-expr-%-of-limit")
}

type requestCost struct {
	// total is every pass the plugin runs for the request, over every
	// policy that matches it.
	total int64
	// validations is the match conditions and the validations alone.
	validations int64
	// worst is the costliest single expression, its variables included.
	worst int64
}

// celCost is the CEL cost the apiserver charges for r (vapeval.PassCost,
// summed over the policies whose rules match it), and the costliest single
// expression that the plugin evaluates for it.
func celCost(b *testing.B, bundle []*vapeval.PolicyDir, r vapeval.Request, ns *corev1.Namespace) requestCost {
	b.Helper()
	ctx := context.Background()
	var out requestCost
	for _, p := range bundle {
		if !matches(p.Policy, r) {
			continue
		}
		in, err := vapeval.NewInput(r, nil, ns)
		if err != nil {
			b.Fatal(err)
		}
		passes, err := vapeval.CompilePasses(p.Policy)
		if err != nil {
			b.Fatal(err)
		}
		pc, err := passes.Cost(ctx, in)
		if err != nil {
			b.Fatalf("%s: %v", p.Policy.Name, err)
		}
		out.total += pc.Total()
		out.validations += pc.MatchConditions + pc.Validations
		exprs, err := vapeval.CompileExpressions(p.Policy)
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range exprs {
			if e.Kind == "variable" || (!pc.Matched && e.Kind != "matchCondition") {
				continue
			}
			out.worst = max(out.worst, e.EvaluateInput(ctx, in).Cost)
		}
	}
	return out
}
