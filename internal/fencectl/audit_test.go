package fencectl

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

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
		name string
		o    AuditOptions
		want []string
	}{{
		name: "every namespace, by default",
		want: []string{
			"CiliumNetworkPolicy gone/" + policy.GetName() + " namespace-missing",
			"Sandbox gone/left namespace-missing",
			"Sandbox sbx/legacy malformed-annotation",
		},
	}, {
		name: "-n names one namespace",
		o:    AuditOptions{Namespace: "sbx"},
		want: []string{"Sandbox sbx/legacy malformed-annotation"},
	}, {
		name: "-l narrows the audited objects by label",
		o:    AuditOptions{Selector: "tier=legacy"},
		want: []string{"Sandbox sbx/legacy malformed-annotation"},
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
		})
	}
}
