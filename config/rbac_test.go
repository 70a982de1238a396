package config_test

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	tst "github.com/sandbox-fence/sandbox-fence/internal/testing"
)

// narrowed is a resource the webhook's roles may write only by name: the
// objects of it the webhook owns, and which verbs it may use on them.
type narrowed struct {
	group, resource string
	names           []string // the resourceNames a get/update/patch rule may carry
	byName          []string // verbs allowed only with resourceNames: names
	unnamed         []string // verbs allowed without resourceNames (an informer's list/watch)
	namespaced      bool     // unnamed verbs only in a Role of the webhook's namespace
	// rendered: the controller also needs these verbs, with or without
	// self-managed certificates (config/webhook/base/rbac-render.yaml).
	rendered []string
}

// The cert rotation's RBAC (config/webhook/base/rbac-cert-rotation.yaml;
// docs/webhook.md, "RBAC (least privilege)"): cert-controller writes the
// webhook's own Secret and webhook configuration, by name; its informers
// list and watch, which RBAC cannot narrow by name, so Secrets only inside
// the webhook's namespace, which holds no other Secret. Nothing may create
// (RBAC cannot narrow create by name) or delete either, and no wildcard may
// reach them.
//
// The controller that renders the FenceConfig patches the webhook
// configuration's bound-hosts condition and the config variable of the
// four policies that read configuration, by name too; patching any other
// policy would let the webhook's identity switch a policy off.
var narrowedResources = []narrowed{
	{group: "", resource: "secrets", names: []string{"sandbox-fence-webhook-cert"},
		byName: []string{"get", "update", "patch"}, unnamed: []string{"list", "watch"}, namespaced: true},
	{group: "admissionregistration.k8s.io", resource: "validatingwebhookconfigurations", names: []string{"sandbox-fence-webhook"},
		byName: []string{"get", "update", "patch"}, unnamed: []string{"list", "watch"}, rendered: []string{"get", "patch", "list", "watch"}},
	{group: "admissionregistration.k8s.io", resource: "validatingadmissionpolicies",
		names:  []string{"sandbox-fence-cilium-egress", "sandbox-fence-cilium-owner", "sandbox-fence-holder-epoch-repair", "sandbox-fence-strict-delete"},
		byName: []string{"patch"}, unnamed: []string{"list", "watch"}, rendered: []string{"patch", "list", "watch"}},
}

// role is one Role or ClusterRole of a rendering.
type role struct {
	kind, namespace, name string
	rules                 []rbacv1.PolicyRule
}

func roles(t *testing.T, objs []*unstructured.Unstructured) []role {
	t.Helper()
	var out []role
	for _, o := range objs {
		if o.GetAPIVersion() != rbacv1.SchemeGroupVersion.String() || (o.GetKind() != "Role" && o.GetKind() != "ClusterRole") {
			continue
		}
		var r rbacv1.ClusterRole // a Role's fields are a subset
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, &r, true); err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
		out = append(out, role{o.GetKind(), o.GetNamespace(), o.GetName(), r.Rules})
	}
	return out
}

// covers says whether rule grants something on group/resource: by name, or
// through a wildcard group or resource.
func covers(r rbacv1.PolicyRule, group, resource string) bool {
	return (slices.Contains(r.APIGroups, group) || slices.Contains(r.APIGroups, rbacv1.APIGroupAll)) &&
		(slices.Contains(r.Resources, resource) || slices.Contains(r.Resources, rbacv1.ResourceAll))
}

// rbacFindings lists every grant on a narrowed resource beyond what
// narrowedResources allows, and every allowed write that is missing.
func rbacFindings(rs []role, namespace string, certRotation bool) []string {
	var bad []string
	for _, n := range narrowedResources {
		granted := map[string]bool{}
		for _, ro := range rs {
			for _, r := range ro.rules {
				if !covers(r, n.group, n.resource) {
					continue
				}
				where := ro.kind + " " + ro.namespace + "/" + ro.name + " on " + n.resource
				for _, v := range r.Verbs {
					switch {
					case slices.Contains(n.byName, v):
						if len(r.ResourceNames) == 0 || slices.ContainsFunc(r.ResourceNames, func(x string) bool { return !slices.Contains(n.names, x) }) {
							bad = append(bad, where+": "+v+" with resourceNames "+fmtList(r.ResourceNames)+", want only "+fmtList(n.names))
						}
					case slices.Contains(n.unnamed, v):
						if n.namespaced && (ro.kind != "Role" || ro.namespace != namespace) {
							bad = append(bad, where+": "+v+" outside a Role of "+namespace)
						}
					default:
						bad = append(bad, where+": verb "+v+" (only "+fmtList(append(slices.Clone(n.byName), n.unnamed...))+" are granted, writes by name)")
					}
					granted[v] = true
				}
			}
		}
		for _, v := range n.byName {
			if certRotation && !granted[v] && n.resource != "validatingadmissionpolicies" {
				bad = append(bad, n.resource+": "+v+" on "+fmtList(n.names)+" not granted: cert-controller cannot rotate")
			}
		}
		for _, v := range n.rendered {
			if !granted[v] {
				bad = append(bad, n.resource+": "+v+" not granted: the controller cannot render the FenceConfig")
			}
		}
		for v := range granted {
			if !certRotation && !slices.Contains(n.rendered, v) {
				bad = append(bad, n.resource+": "+v+" granted without self-managed certificates (the cert-manager overlay removes the rotation's RBAC)")
			}
		}
	}
	return bad
}

func fmtList(s []string) string {
	out := "["
	for i, e := range s {
		if i > 0 {
			out += " "
		}
		out += e
	}
	return out + "]"
}

// No Role or ClusterRole of an install may create, delete or wildcard the
// webhook's certificate Secret or webhook configuration, nor get, update or
// patch them without naming the one object (docs/webhook.md, "RBAC (least
// privilege)"); Secrets are listed and watched only inside the webhook's
// namespace. Checked on config/default (self-managed certificates), on
// another namespace, and with cert-manager, which needs none of it.
func TestTheCertRotationRBACIsNarrowedByName(t *testing.T) {
	for _, tc := range []struct {
		name, namespace string
		k               map[string]any
		certRotation    bool
	}{
		{"config/default", tst.DefaultNamespace, map[string]any{"resources": []string{"config/default"}}, true},
		{"config/default in another namespace", otherNamespace, map[string]any{
			"resources": []string{"config/default"}, "namespace": otherNamespace,
			"transformers": []string{"config/transformers/namespace"},
		}, true},
		{"cert-manager", tst.DefaultNamespace, map[string]any{"resources": []string{"config/vap", "config/webhook/overlays/cert-manager"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, b := range rbacFindings(roles(t, tst.RenderKustomization(t, ".", tc.k)), tc.namespace, tc.certRotation) {
				t.Error(b)
			}
		})
	}
}

// The check itself: each widening the audit named is a finding.
func TestRBACFindingsCatchWidenedRules(t *testing.T) {
	const ns = tst.DefaultNamespace
	secretRole := func(rules ...rbacv1.PolicyRule) role {
		return role{"Role", ns, "sandbox-fence-webhook-cert-rotation", rules}
	}
	webhookRole := role{"ClusterRole", "", "sandbox-fence-webhook-cert-rotation", []rbacv1.PolicyRule{
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations"}, ResourceNames: []string{"sandbox-fence-webhook"}, Verbs: []string{"get", "update", "patch"}},
	}}
	policies := []string{"sandbox-fence-cilium-egress", "sandbox-fence-cilium-owner", "sandbox-fence-holder-epoch-repair", "sandbox-fence-strict-delete"}
	renderRole := role{"ClusterRole", "", "sandbox-fence-webhook-render", []rbacv1.PolicyRule{
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingadmissionpolicies"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingadmissionpolicies"}, ResourceNames: policies, Verbs: []string{"patch"}},
	}}
	list := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"list", "watch"}}
	write := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"sandbox-fence-webhook-cert"}, Verbs: []string{"get", "update", "patch"}}
	with := func(r rbacv1.PolicyRule, f func(*rbacv1.PolicyRule)) rbacv1.PolicyRule {
		r.APIGroups, r.Resources, r.ResourceNames, r.Verbs = slices.Clone(r.APIGroups), slices.Clone(r.Resources), slices.Clone(r.ResourceNames), slices.Clone(r.Verbs)
		f(&r)
		return r
	}
	for _, tc := range []struct {
		name  string
		roles []role
		want  int
	}{
		{"the shipped rules are clean", []role{secretRole(list, write), webhookRole}, 0},
		{"create on Secrets is a finding", []role{secretRole(list, with(write, func(r *rbacv1.PolicyRule) { r.Verbs = append(r.Verbs, "create") })), webhookRole}, 1},
		{"delete on Secrets is a finding", []role{secretRole(with(list, func(r *rbacv1.PolicyRule) { r.Verbs = append(r.Verbs, "delete") }), write), webhookRole}, 1},
		{"every verb on Secrets is a finding", []role{secretRole(list, write, with(list, func(r *rbacv1.PolicyRule) { r.Verbs = []string{"*"} })), webhookRole}, 1},
		{"a wildcard resource reaching Secrets is a finding", []role{secretRole(list, write, with(list, func(r *rbacv1.PolicyRule) { r.Resources = []string{"*"}; r.Verbs = []string{"deletecollection"} })), webhookRole}, 1},
		{"update on Secrets without resourceNames is a finding", []role{secretRole(list, with(write, func(r *rbacv1.PolicyRule) { r.ResourceNames = nil })), webhookRole}, 3},
		{"a second Secret name is a finding", []role{secretRole(list, with(write, func(r *rbacv1.PolicyRule) { r.ResourceNames = append(r.ResourceNames, "other") })), webhookRole}, 3},
		{"listing Secrets cluster-wide is a finding", []role{secretRole(write), {"ClusterRole", "", "x", []rbacv1.PolicyRule{list}}, webhookRole}, 2},
		{"patch on webhook configurations without resourceNames is a finding", []role{secretRole(list, write), {"ClusterRole", "", "x", []rbacv1.PolicyRule{{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations"}, Verbs: []string{"patch"}}}}, webhookRole}, 1},
		{"a lost write is a finding", []role{secretRole(list, with(write, func(r *rbacv1.PolicyRule) { r.Verbs = []string{"get"} })), webhookRole}, 2},
		{"patch on every policy is a finding: it could switch any policy off", []role{secretRole(list, write), webhookRole,
			{"ClusterRole", "", "x", []rbacv1.PolicyRule{{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingadmissionpolicies"}, Verbs: []string{"patch"}}}}}, 1},
		{"patch on a policy the fence does not render is a finding", []role{secretRole(list, write), webhookRole,
			{"ClusterRole", "", "x", []rbacv1.PolicyRule{{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingadmissionpolicies"},
				ResourceNames: []string{"sandbox-fence-holder-epoch"}, Verbs: []string{"patch"}}}}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := rbacFindings(append(tc.roles, renderRole), ns, true); len(got) != tc.want {
				t.Errorf("%d findings, want %d: %q", len(got), tc.want, got)
			}
		})
	}
}
