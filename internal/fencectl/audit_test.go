package fencectl

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	reportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/internal/vapeval"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// A namespace deletion can finish and leave custom resources stored in the
// namespace (seen once in CI, on v1.33, after an API server restart). The
// API server's evaluator answers only "namespace not found" for them; the
// audit must say what is wrong (the namespace), not call a well-formed
// epoch malformed, while still judging the objects whose namespace exists.
// -n and -l narrow what is audited.
func TestAuditReportsObjectsWhoseNamespaceIsGone(t *testing.T) {
	pd, err := vapeval.LoadPolicyDir("../../policies/holder-epoch")
	if err != nil {
		t.Fatal(err)
	}
	kc := fake.NewClientset(pd.Policy, pd.Binding, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sbx"}})
	sandbox := func(ns, name, epoch string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(sandboxGVR.GroupVersion().WithKind("Sandbox"))
		u.SetNamespace(ns)
		u.SetName(name)
		u.SetAnnotations(map[string]string{fence.AnnotationHolderEpoch: epoch})
		return u
	}
	policy := &unstructured.Unstructured{}
	policy.SetGroupVersionKind(cnpGVR.GroupVersion().WithKind("CiliumNetworkPolicy"))
	policy.SetNamespace("gone")
	policy.SetName(fence.PolicyNamePrefix + "0b6e4a4e-6a3c-4c55-9d8b-4a3e6b7f5a01")
	dc := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		sandboxGVR: "SandboxList", claimGVR: "SandboxClaimList", cnpGVR: "CiliumNetworkPolicyList", fenceConfigGVR: "FenceConfigList",
	}, policy)
	// The fake guesses "sandboxs" from the kind; store them under their resource.
	legacy := sandbox("sbx", "legacy", "07")
	legacy.SetLabels(map[string]string{"tier": "legacy"})
	for _, s := range []*unstructured.Unstructured{sandbox("sbx", "kept", "3"), legacy, sandbox("gone", "left", "3")} {
		if err := dc.Tracker().Create(sandboxGVR, s, s.GetNamespace()); err != nil {
			t.Fatal(err)
		}
	}

	for _, c := range []struct {
		name    string
		o       AuditOptions
		want    []string
		reports []string // as policy reports: kind namespace/name pass fail, then each result
	}{{
		name: "every namespace, by default",
		want: []string{
			"CiliumNetworkPolicy gone/" + policy.GetName() + " namespace-missing",
			"Sandbox gone/left namespace-missing",
			"Sandbox sbx/legacy malformed-annotation",
		},
		// What no namespace can hold goes to the ClusterReport; sbx's
		// well-formed Sandbox is a pass.
		reports: []string{
			"Report sbx/sandbox-fence pass=1 fail=1",
			"  fail sandbox-fence-holder-epoch/malformed-annotation agents.x-k8s.io/v1beta1 Sandbox sbx/legacy",
			"ClusterReport /sandbox-fence pass=0 fail=2",
			"  fail Namespace/namespace-missing cilium.io/v2 CiliumNetworkPolicy gone/" + policy.GetName(),
			"  fail Namespace/namespace-missing agents.x-k8s.io/v1beta1 Sandbox gone/left",
		},
	}, {
		name:    "-n names one namespace",
		o:       AuditOptions{Namespace: "sbx"},
		want:    []string{"Sandbox sbx/legacy malformed-annotation"},
		reports: []string{"Report sbx/sandbox-fence pass=1 fail=1", "  fail sandbox-fence-holder-epoch/malformed-annotation agents.x-k8s.io/v1beta1 Sandbox sbx/legacy", "ClusterReport /sandbox-fence pass=0 fail=0"},
	}, {
		name:    "-l narrows the audited objects by label",
		o:       AuditOptions{Selector: "tier=legacy"},
		want:    []string{"Sandbox sbx/legacy malformed-annotation"},
		reports: []string{"Report sbx/sandbox-fence pass=0 fail=1", "  fail sandbox-fence-holder-epoch/malformed-annotation agents.x-k8s.io/v1beta1 Sandbox sbx/legacy", "ClusterReport /sandbox-fence pass=0 fail=0"},
	}} {
		t.Run(c.name, func(t *testing.T) {
			c.o.ConfigName = "sandbox-fence"
			r, err := Audit(context.Background(), Clients{Kube: kc, Dynamic: dc}, c.o)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range r.Findings {
				got = append(got, f.Kind+" "+f.Namespace+"/"+f.Name+" "+f.Check)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("findings (-want +got):\n%s\nall: %+v", diff, r.Findings)
			}
			if diff := cmp.Diff(c.reports, reportLines(t, r.PolicyReports(time.Unix(0, 0)))); diff != "" {
				t.Errorf("policy reports (-want +got):\n%s", diff)
			}
		})
	}
}

// reportLines flattens the policy reports an audit renders, each as a line
// with its summary, then a line per result.
func reportLines(t *testing.T, l *metav1.List) []string {
	t.Helper()
	var out []string
	for _, item := range l.Items {
		var kind, key string
		var sum reportsv1alpha1.ReportSummary
		var results []reportsv1alpha1.ReportResult
		switch o := item.Object.(type) {
		case *reportsv1alpha1.Report:
			kind, key, sum, results = o.Kind, o.Namespace+"/"+o.Name, o.Summary, o.Results
		case *reportsv1alpha1.ClusterReport:
			kind, key, sum, results = o.Kind, "/"+o.Name, o.Summary, o.Results
		default:
			t.Fatalf("a %T in the policy reports", o)
		}
		out = append(out, fmt.Sprintf("%s %s pass=%d fail=%d", kind, key, sum.Pass, sum.Fail))
		for _, res := range results {
			s := res.Subjects[0]
			out = append(out, fmt.Sprintf("  %s %s/%s %s %s %s/%s", res.Result, res.Policy, res.Rule, s.APIVersion, s.Kind, s.Namespace, s.Name))
		}
	}
	return out
}

// The audit names every namespace a host is bound in but nobody opted in,
// whether its list names it or its namespaceSelector selects it: the fence
// refuses the host's writes there until the namespace is labelled.
func TestNamespaceFindingsNameListedAndSelectedNamespaces(t *testing.T) {
	ns := func(name string, labels map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	const host = "system:serviceaccount:h:host"
	cfg := &fencev1alpha1.FenceConfig{ObjectMeta: metav1.ObjectMeta{Name: "sandbox-fence"}, Spec: fencev1alpha1.FenceConfigSpec{Hosts: []fencev1alpha1.Host{{
		Username: host, Namespaces: []string{"listed"},
		NamespaceSelector: &fencev1alpha1.NamespaceSelector{MatchLabels: map[string]fencev1alpha1.LabelValue{"tier": "agents"}},
	}}}}
	nss := map[string]*corev1.Namespace{
		"listed":       ns("listed", nil),
		"selected":     ns("selected", map[string]string{"tier": "agents"}),
		"selected-in":  ns("selected-in", map[string]string{"tier": "agents", fencev1alpha1.FencedNamespaceLabel: "true"}),
		"not-selected": ns("not-selected", map[string]string{"tier": "other"}),
	}
	got := namespaceFindings(&installed{config: cfg}, nss, nil)
	want := []Finding{
		{Kind: "Namespace", Name: "listed", Check: CheckNamespaceNotOptedIn, By: "FenceConfig",
			Message: "host " + host + " drives sandboxes in listed, but the namespace lacks fence.sandbox.namzu.ai/enabled=true, so the fence refuses its CiliumNetworkPolicy writes there until the namespace is labelled (contract §4.3 rule 8)"},
		{Kind: "Namespace", Name: "selected", Check: CheckNamespaceNotOptedIn, By: "FenceConfig",
			Message: "the namespaceSelector of host " + host + " selects selected, but the namespace lacks fence.sandbox.namzu.ai/enabled=true, so the fence refuses its CiliumNetworkPolicy writes there until the namespace is labelled (contract §4.3 rule 8)"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("findings (-want +got):\n%s", d)
	}
}
