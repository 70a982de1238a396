package webhook_test

import (
	"cmp"
	"context"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	celplugin "k8s.io/apiserver/pkg/admission/plugin/cel"
	apiwebhook "k8s.io/apiserver/pkg/admission/plugin/webhook"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/internal/policyconfig"
	tst "github.com/sandbox-fence/sandbox-fence/internal/testing"
)

// TestShippedMatchConditionsRouteOnlyBoundHosts evaluates the match
// conditions of the shipped webhook configuration, as the controller renders
// them (internal/policyconfig), with the API server's own matcher (the code
// its webhook dispatcher runs): a bound host reaches the webhook; another
// ServiceAccount, a human, a kube-system controller and the webhook's own
// ServiceAccount do not, so no webhook outage can block them; a list-bound
// host reaches it in its own namespaces only, a host bound by selector in
// all. While the FenceConfig is missing, nobody does. As shipped (what an
// upgrade's apply puts back over the rendering), every identity that may be
// a host does, writing a per-sandbox name, so the placeholder never routes
// less than a rendering.
func TestShippedMatchConditionsRouteOnlyBoundHosts(t *testing.T) {
	var shipped admissionregistrationv1.ValidatingWebhookConfiguration
	if !tst.Find(t, tst.Render(t, configDir, "webhook"), "ValidatingWebhookConfiguration", "sandbox-fence-webhook", &shipped) {
		t.Fatal("config/webhook renders no ValidatingWebhookConfiguration sandbox-fence-webhook")
	}
	if len(shipped.Webhooks) != 1 {
		t.Fatalf("want the write entry only, got %d entries", len(shipped.Webhooks))
	}
	const host = "system:serviceaccount:sandboxes:sandbox-host"
	const selecting = "system:serviceaccount:agents:host"
	cfg := tst.MakeConfig(fencev1alpha1.DefaultConfigName).NoHosts().Host(host, "sandboxes").
		SelectorHost(selecting, map[string]string{"tier": "agents"}).Obj()
	rendered := policyconfig.RenderWebhooks(&shipped, policyconfig.FromFenceConfig(cfg.Name, cfg))
	missing := policyconfig.RenderWebhooks(&shipped, policyconfig.FromFenceConfig(cfg.Name, nil))
	compiler := celplugin.NewConditionCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	users := []struct {
		name      string
		user      user.Info
		reaches   bool   // rendered
		shipped   bool   // as shipped
		namespace string // default: the host's
		object    string // default: a per-sandbox name
	}{
		{"the bound host", &user.DefaultInfo{Name: host, Groups: []string{"system:serviceaccounts"}}, true, true, "", ""},
		{"the bound host writing another name", &user.DefaultInfo{Name: host}, true, false, "", "team-policy"},
		// The webhook checks owners in the host's namespaces only (the
		// egress policy judges the rest), so no other write of the host
		// waits on it.
		{"the bound host in a namespace that is not its own", &user.DefaultInfo{Name: host}, false, true, "team-a", ""},
		// A match condition cannot read a namespace's labels, so a host
		// bound by selector reaches the webhook everywhere, and the
		// webhook tells its namespaces (CachedNamespaces).
		{"a host bound by selector, in any namespace", &user.DefaultInfo{Name: selecting}, true, true, "team-a", ""},
		{"a ServiceAccount that is no host", &user.DefaultInfo{Name: "system:serviceaccount:team-a:builder"}, false, true, "", ""},
		{"a ServiceAccount that is no host writing another name", &user.DefaultInfo{Name: "system:serviceaccount:team-a:builder"}, false, false, "", "team-policy"},
		{"a human user", &user.DefaultInfo{Name: "sandbox-operator", Groups: []string{"system:authenticated"}}, false, false, "", ""},
		{"a user named like the host's ServiceAccount", &user.DefaultInfo{Name: "serviceaccount:sandboxes:sandbox-host"}, false, false, "", ""},
		{"the garbage collector", &user.DefaultInfo{Name: "system:serviceaccount:kube-system:generic-garbage-collector"}, false, false, "", ""},
		{"the webhook's own ServiceAccount", &user.DefaultInfo{Name: "system:serviceaccount:sandbox-fence-system:sandbox-fence-webhook"}, false, true, "", ""},
	}
	gvk := schema.GroupVersionKind{Group: "cilium.io", Version: "v2", Kind: "CiliumNetworkPolicy"}
	gvr := schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumnetworkpolicies"}
	policy := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
		"metadata": map[string]any{"name": "namzu-sbx-0c9a7c6e", "namespace": "sandboxes"},
	}}
	for _, state := range []struct {
		name string
		vwc  *admissionregistrationv1.ValidatingWebhookConfiguration
	}{{"as shipped", &shipped}, {"FenceConfig missing", missing}, {"rendered", rendered}} {
		vwc := state.vwc
		w := &vwc.Webhooks[0]
		op := admission.Create
		obj, old := policy, (*unstructured.Unstructured)(nil)
		if w.Rules[0].Operations[0] == admissionregistrationv1.Delete {
			op, obj, old = admission.Delete, nil, policy
		}
		matcher := apiwebhook.NewValidatingWebhookAccessor("uid", vwc.Name, w).GetCompiledMatcher(compiler)
		for _, u := range users {
			t.Run(state.name+"/"+u.name, func(t *testing.T) {
				var o, oo *unstructured.Unstructured = obj, old
				ns, name := cmp.Or(u.namespace, "sandboxes"), cmp.Or(u.object, "namzu-sbx-0c9a7c6e")
				attrs := admission.NewAttributesRecord(nilIfEmpty(o), nilIfEmpty(oo), gvk, ns, name, gvr, "", op, nil, false, u.user)
				va := &admission.VersionedAttributes{Attributes: attrs, VersionedKind: gvk, VersionedObject: admission.NewLazyObject(nilIfEmpty(o)), VersionedOldObject: admission.NewLazyObject(nilIfEmpty(oo))}
				res := matcher.Match(context.Background(), va, nil, nil)
				if res.Error != nil {
					t.Fatalf("matchConditions: %v", res.Error)
				}
				want := u.reaches && state.vwc == rendered || u.shipped && state.vwc == &shipped
				if res.Matches != want {
					t.Errorf("%s (%s) reaches the webhook: %v, want %v (failed condition: %v)", u.user.GetName(), u.name, res.Matches, want, res.FailedConditionName)
				}
			})
		}
	}
}

// nilIfEmpty turns a nil *Unstructured into a nil runtime.Object, not an
// interface holding a nil pointer.
func nilIfEmpty(u *unstructured.Unstructured) runtime.Object {
	if u == nil {
		return nil
	}
	return u
}
