package webhook_test

import (
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

	tst "github.com/sandbox-fence/sandbox-fence/internal/testing"
)

// TestShippedMatchConditionsRouteOnlyIdentitiesThatMayBeHosts evaluates the
// matchConditions of the shipped webhook configuration with the API
// server's own matcher (the code its webhook dispatcher runs) for the
// identities of contract §8.7: a ServiceAccount outside kube-system reaches
// both entries; a human, a kube-system controller and the webhook's own
// ServiceAccount reach neither, so no outage and no missing FenceConfig can
// block them. Each condition is needed: dropping one lets one of them in
// (the mutation check, make mutants, removes each).
func TestShippedMatchConditionsRouteOnlyIdentitiesThatMayBeHosts(t *testing.T) {
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	if !tst.Find(t, tst.Render(t, configDir, "webhook"), "ValidatingWebhookConfiguration", "sandbox-fence-webhook", &vwc) {
		t.Fatal("config/webhook renders no ValidatingWebhookConfiguration sandbox-fence-webhook")
	}
	if len(vwc.Webhooks) != 2 {
		t.Fatalf("want the write and the delete entry, got %d entries", len(vwc.Webhooks))
	}
	compiler := celplugin.NewConditionCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	users := []struct {
		name    string
		user    user.Info
		reaches bool
	}{
		{"a host's ServiceAccount", &user.DefaultInfo{Name: "system:serviceaccount:sandboxes:sandbox-host", Groups: []string{"system:serviceaccounts"}}, true},
		{"a ServiceAccount of another namespace", &user.DefaultInfo{Name: "system:serviceaccount:team-a:builder"}, true},
		{"a human user", &user.DefaultInfo{Name: "sandbox-operator", Groups: []string{"system:authenticated"}}, false},
		{"a user named like a ServiceAccount's namespace", &user.DefaultInfo{Name: "serviceaccount:sandboxes:sandbox-host"}, false},
		{"the garbage collector", &user.DefaultInfo{Name: "system:serviceaccount:kube-system:generic-garbage-collector"}, false},
		{"the namespace controller", &user.DefaultInfo{Name: "system:serviceaccount:kube-system:namespace-controller"}, false},
		{"the webhook's own ServiceAccount", &user.DefaultInfo{Name: "system:serviceaccount:sandbox-fence-system:sandbox-fence-webhook"}, false},
	}
	gvk := schema.GroupVersionKind{Group: "cilium.io", Version: "v2", Kind: "CiliumNetworkPolicy"}
	gvr := schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumnetworkpolicies"}
	policy := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
		"metadata": map[string]any{"name": "namzu-sbx-0c9a7c6e", "namespace": "sandboxes"},
	}}
	for i := range vwc.Webhooks {
		w := &vwc.Webhooks[i]
		op := admission.Create
		obj, old := policy, (*unstructured.Unstructured)(nil)
		if w.Rules[0].Operations[0] == admissionregistrationv1.Delete {
			op, obj, old = admission.Delete, nil, policy
		}
		matcher := apiwebhook.NewValidatingWebhookAccessor("uid", vwc.Name, w).GetCompiledMatcher(compiler)
		for _, u := range users {
			t.Run(w.Name+"/"+u.name, func(t *testing.T) {
				var o, oo *unstructured.Unstructured = obj, old
				attrs := admission.NewAttributesRecord(nilIfEmpty(o), nilIfEmpty(oo), gvk, "sandboxes", "namzu-sbx-0c9a7c6e", gvr, "", op, nil, false, u.user)
				va := &admission.VersionedAttributes{Attributes: attrs, VersionedKind: gvk, VersionedObject: admission.NewLazyObject(nilIfEmpty(o)), VersionedOldObject: admission.NewLazyObject(nilIfEmpty(oo))}
				res := matcher.Match(context.Background(), va, nil, nil)
				if res.Error != nil {
					t.Fatalf("matchConditions: %v", res.Error)
				}
				if res.Matches != u.reaches {
					t.Errorf("%s (%s) reaches the webhook: %v, want %v (failed condition: %v)", u.user.GetName(), u.name, res.Matches, u.reaches, res.FailedConditionName)
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
