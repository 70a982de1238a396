package lifecycle_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	fakedynamic "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/sandbox-fence/sandbox-fence/internal/kubeversion"
	"github.com/sandbox-fence/sandbox-fence/internal/lifecycle"
	tst "github.com/sandbox-fence/sandbox-fence/internal/testing"
	"github.com/sandbox-fence/sandbox-fence/internal/webhook"
)

const configDir = "../../config"

// kinds summarises a plan as "step: Kind/name ..." lines.
func kinds(steps []lifecycle.Step) []string {
	var out []string
	for _, s := range steps {
		seen := map[string]bool{}
		var ks []string
		for _, o := range s.Objects {
			if !seen[o.GetKind()] {
				seen[o.GetKind()] = true
				ks = append(ks, o.GetKind())
			}
		}
		out = append(out, s.Name+": "+strings.Join(ks, ","))
	}
	return out
}

// TestPlansOrderTheShippedBundle renders config/default and checks both
// orders kind by kind: a fail-closed webhook configuration is applied last
// and deleted first, a binding applied after its policy and FenceConfig and
// deleted before them, the CRDs first and last.
func TestPlansOrderTheShippedBundle(t *testing.T) {
	objs := tst.Render(t, configDir, "default")
	install := []string{
		"CRDs: CustomResourceDefinition",
		"namespaces: Namespace",
		"the webhook workload: ServiceAccount,ResourceQuota,Secret,Service,Deployment,PodDisruptionBudget,ClusterRole,ClusterRoleBinding,Role,RoleBinding",
		"FenceConfig: FenceConfig",
		"policies: ValidatingAdmissionPolicy",
		"policy bindings: ValidatingAdmissionPolicyBinding",
		"webhook configurations: ValidatingWebhookConfiguration",
	}
	uninstall := []string{
		"webhook configurations: ValidatingWebhookConfiguration",
		"policy bindings: ValidatingAdmissionPolicyBinding",
		"policies: ValidatingAdmissionPolicy",
		"the webhook workload: ServiceAccount,ResourceQuota,Secret,Service,Deployment,PodDisruptionBudget,ClusterRole,ClusterRoleBinding,Role,RoleBinding",
		"namespaces: Namespace",
		"FenceConfig: FenceConfig",
		"CRDs: CustomResourceDefinition",
	}
	sortKinds := func(lines []string) []string {
		out := make([]string, len(lines))
		for i, l := range lines {
			name, ks, _ := strings.Cut(l, ": ")
			parts := strings.Split(ks, ",")
			sortStrings(parts)
			out[i] = name + ": " + strings.Join(parts, ",")
		}
		return out
	}
	if diff := cmp.Diff(sortKinds(install), sortKinds(kinds(lifecycle.InstallPlan(objs)))); diff != "" {
		t.Errorf("install plan (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(sortKinds(uninstall), sortKinds(kinds(lifecycle.UninstallPlan(objs)))); diff != "" {
		t.Errorf("uninstall plan (-want +got):\n%s", diff)
	}
	// Every rendered object is in exactly one step of each plan.
	for name, plan := range map[string][]lifecycle.Step{"install": lifecycle.InstallPlan(objs), "uninstall": lifecycle.UninstallPlan(objs)} {
		n := 0
		for _, s := range plan {
			n += len(s.Objects)
		}
		if n != len(objs) {
			t.Errorf("%s plan holds %d objects, the bundle %d", name, n, len(objs))
		}
	}
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// discoveryServing fakes a server of version v serving the agent-sandbox
// and Cilium CRDs unless told otherwise.
func discoveryServing(v string, without ...string) *fakediscovery.FakeDiscovery {
	d := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}, FakedServerVersion: &version.Info{GitVersion: v}}
	skip := map[string]bool{}
	for _, w := range without {
		skip[w] = true
	}
	for _, p := range webhook.Prerequisites {
		if skip[p.GVR.Resource] {
			continue
		}
		d.Resources = append(d.Resources, &metav1.APIResourceList{GroupVersion: p.GVR.GroupVersion().String(), APIResources: []metav1.APIResource{{Name: p.GVR.Resource}}})
	}
	return d
}

// belowMinimum is the last patch of the minor before kubeversion.Minimum,
// the case kubeversion's own test refuses.
func belowMinimum(t *testing.T) string {
	var major, minor int
	if _, err := fmt.Sscanf(kubeversion.Minimum, "v%d.%d", &major, &minor); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("v%d.%d.99", major, minor-1)
}

// TestInstallWritesNothingWhenPreflightFails: on a cluster older than the
// policies support, or without the CRDs the fence guards, Install stops
// before its first write, with a message naming the reason.
func TestInstallWritesNothingWhenPreflightFails(t *testing.T) {
	objs := tst.Render(t, configDir, "default")
	tests := []struct {
		name      string
		discovery *fakediscovery.FakeDiscovery
		wantIn    []string
	}{
		{
			name:      "a cluster one minor below the oldest supported release",
			discovery: discoveryServing(belowMinimum(t)),
			wantIn:    []string{"preflight: nothing installed", "older than " + kubeversion.Minimum},
		},
		{
			name:      "a supported cluster without the Cilium CRD",
			discovery: discoveryServing(kubeversion.OldestTested, "ciliumnetworkpolicies"),
			wantIn:    []string{"preflight: nothing installed", "ciliumnetworkpolicies.cilium.io (cilium.io/v2/ciliumnetworkpolicies"},
		},
		{
			name:      "a supported cluster without the agent-sandbox CRDs",
			discovery: discoveryServing(kubeversion.OldestTested, "sandboxes", "sandboxclaims"),
			wantIn:    []string{"sandboxes.agents.x-k8s.io", "sandboxclaims.extensions.agents.x-k8s.io"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dyn := fakedynamic.NewSimpleDynamicClient(runtime.NewScheme())
			r := &lifecycle.Runner{Dynamic: dyn, Discovery: tt.discovery, Mapper: resettable{meta.NewDefaultRESTMapper(nil)}}
			err := r.Install(context.Background(), objs)
			if err == nil {
				t.Fatal("Install succeeded")
			}
			for _, w := range tt.wantIn {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if a := dyn.Actions(); len(a) != 0 {
				t.Errorf("Install sent %d requests before refusing, want none: %v", len(a), a)
			}
		})
	}
}

// TestPreflightPassesOnASupportedCluster: the refusal above is the version
// and the CRDs, not the preflight refusing everything. The FenceConfig CRD
// is the bundle's own and need not be there yet.
func TestPreflightPassesOnASupportedCluster(t *testing.T) {
	r := &lifecycle.Runner{Discovery: discoveryServing(kubeversion.OldestTested, "fenceconfigs")}
	if err := r.Preflight(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestUninstallDeletesInPlanOrder runs Uninstall against a fake cluster
// holding the rendered bundle and records the order of the deletes.
func TestUninstallDeletesInPlanOrder(t *testing.T) {
	objs := tst.Render(t, configDir, "default")
	mapper := meta.NewDefaultRESTMapper(nil)
	gvrToList := map[schema.GroupVersionResource]string{}
	var seed []runtime.Object
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		plural := strings.ToLower(gvk.Kind) + "s"
		if strings.HasSuffix(gvk.Kind, "y") {
			plural = strings.ToLower(strings.TrimSuffix(gvk.Kind, "y")) + "ies"
		}
		scope := meta.RESTScopeNamespace
		if o.GetNamespace() == "" {
			scope = meta.RESTScopeRoot
		}
		mapper.AddSpecific(gvk, gvk.GroupVersion().WithResource(plural), gvk.GroupVersion().WithResource(strings.ToLower(gvk.Kind)), scope)
		gvrToList[gvk.GroupVersion().WithResource(plural)] = gvk.Kind + "List"
		b, err := o.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		c := &unstructured.Unstructured{}
		if err := c.UnmarshalJSON(b); err != nil {
			t.Fatal(err)
		}
		seed = append(seed, c)
	}
	dyn := fakedynamic.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), gvrToList, seed...)
	var order []string
	r := &lifecycle.Runner{Dynamic: dyn, Mapper: resettable{mapper},
		BeforeStep: func(_ context.Context, s lifecycle.Step) error { order = append(order, s.Name); return nil }}
	if err := r.Uninstall(context.Background(), objs); err != nil {
		t.Fatal(err)
	}
	want := []string{"webhook configurations", "policy bindings", "policies", "the webhook workload", "namespaces", "FenceConfig", "CRDs"}
	if diff := cmp.Diff(want, order); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	var deleted []string
	for _, a := range dyn.Actions() {
		if d, ok := a.(clienttesting.DeleteAction); ok {
			deleted = append(deleted, d.GetResource().Resource)
		}
	}
	first, last := deleted[0], deleted[len(deleted)-1]
	if first != "validatingwebhookconfigurations" || last != "customresourcedefinitions" {
		t.Errorf("deleted %s first and %s last; want the webhook configuration first and the CRD last (%v)", first, last, deleted)
	}
	for _, o := range objs {
		if _, err := dyn.Resource(mustMapping(t, mapper, o)).Namespace(o.GetNamespace()).Get(context.Background(), o.GetName(), metav1.GetOptions{}); err == nil {
			t.Errorf("%s %s still there after Uninstall", o.GetKind(), o.GetName())
		}
	}
}

func mustMapping(t *testing.T, m meta.RESTMapper, o *unstructured.Unstructured) schema.GroupVersionResource {
	gvk := o.GroupVersionKind()
	mp, err := m.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatal(err)
	}
	return mp.Resource
}

type resettable struct{ *meta.DefaultRESTMapper }

func (resettable) Reset() {}
