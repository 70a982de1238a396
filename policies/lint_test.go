package policies_test

import (
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPolicyConventions holds every shipped policy to the shared denial form
// and names: denials are 422 Invalid (never 403, which a host reads as
// missing RBAC) with a family-prefixed static message (the fallback when a
// messageExpression fails) and a messageExpression; each binding is
// "<policy name>-binding", the name hosts look up, and denies. And to never
// standing in the cluster's way: no policy resolves a parameter (nothing for
// an API server to map after it starts), each has failurePolicy Ignore and a
// namespaceSelector, so that a namespace gone with objects still stored
// fails only that selector's lookup, which Ignore skips
// (TestLeftoversOfAVanishedNamespaceStayDeletable shows both matter). (The
// shipped YAML is the Deny mode; Warn and Audit are kustomize components,
// held to internal/enforcement's table by TestComponentsApplyTheModeTable.)
func TestPolicyConventions(t *testing.T) {
	for _, p := range loadBundle(t) {
		pol, b := p.Policy, p.Binding
		prefix := "holder-epoch: "
		if strings.Contains(pol.Name, "cilium") {
			prefix = "cilium-fence: "
		}
		if pol.Spec.FailurePolicy == nil || *pol.Spec.FailurePolicy != admissionregistrationv1.Ignore {
			t.Errorf("%s: spec.failurePolicy must be Ignore", pol.Name)
		}
		if sel := pol.Spec.MatchConstraints.NamespaceSelector; sel == nil || len(sel.MatchLabels)+len(sel.MatchExpressions) == 0 {
			t.Errorf("%s: spec.matchConstraints.namespaceSelector must select (kubernetes.io/metadata.name Exists matches every namespace)", pol.Name)
		}
		if pol.Spec.ParamKind != nil || b.Spec.ParamRef != nil {
			t.Errorf("%s: no paramKind or paramRef: configuration is rendered into the policy (internal/policyconfig)", pol.Name)
		}
		if len(pol.Spec.Validations) == 0 {
			t.Errorf("%s: no validations", pol.Name)
		}
		for i, v := range pol.Spec.Validations {
			if v.Reason == nil || *v.Reason != metav1.StatusReasonInvalid {
				t.Errorf("%s: spec.validations[%d].reason must be Invalid (HTTP 422, never 403)", pol.Name, i)
			}
			if !strings.HasPrefix(v.Message, prefix) {
				t.Errorf("%s: spec.validations[%d].message must start with %q: %q", pol.Name, i, prefix, v.Message)
			}
			if !strings.HasPrefix(strings.TrimPrefix(v.MessageExpression, "variables."), "'"+prefix) && !strings.Contains(v.MessageExpression, "'"+prefix) {
				t.Errorf("%s: spec.validations[%d].messageExpression must build a message starting with %q", pol.Name, i, prefix)
			}
		}
		if b.Name != pol.Name+"-binding" || b.Spec.PolicyName != pol.Name {
			t.Errorf("binding %s for policy %s: want binding %s-binding naming its policy, the name hosts look up", b.Name, b.Spec.PolicyName, pol.Name)
		}
		if len(b.Spec.ValidationActions) != 1 || b.Spec.ValidationActions[0] != admissionregistrationv1.Deny {
			t.Errorf("%s: validationActions must be [Deny], got %v", b.Name, b.Spec.ValidationActions)
		}
	}
}
