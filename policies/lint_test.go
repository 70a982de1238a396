package policies_test

import (
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPolicyConventions holds every shipped policy to contract §8.1 and the
// shared names: denials are 422 Invalid with a family-prefixed static
// message (the fallback when a messageExpression fails) and a
// messageExpression; the policy fails closed; each binding is
// "<policy name>-binding" and denies. (The shipped YAML is the Deny mode;
// Warn and Audit are kustomize components, held to internal/enforcement's
// table by TestComponentsApplyTheModeTable.)
func TestPolicyConventions(t *testing.T) {
	for _, p := range loadBundle(t) {
		pol, b := p.Policy, p.Binding
		prefix := "holder-epoch: "
		if strings.Contains(pol.Name, "cilium") {
			prefix = "cilium-fence: "
		}
		// The repair policy is the one exception: its configuration error
		// (an unmappable paramKind) comes before matchConditions and would
		// refuse every Sandbox UPDATE in the cluster; see its policy.yaml.
		wantFailure := admissionregistrationv1.Fail
		if pol.Name == "sandbox-fence-holder-epoch-repair" {
			wantFailure = admissionregistrationv1.Ignore
		}
		if pol.Spec.FailurePolicy == nil || *pol.Spec.FailurePolicy != wantFailure {
			t.Errorf("%s: spec.failurePolicy must be %s", pol.Name, wantFailure)
		}
		if len(pol.Spec.Validations) == 0 {
			t.Errorf("%s: no validations", pol.Name)
		}
		for i, v := range pol.Spec.Validations {
			if v.Reason == nil || *v.Reason != metav1.StatusReasonInvalid {
				t.Errorf("%s: spec.validations[%d].reason must be Invalid (HTTP 422, contract §8.1)", pol.Name, i)
			}
			if !strings.HasPrefix(v.Message, prefix) {
				t.Errorf("%s: spec.validations[%d].message must start with %q: %q", pol.Name, i, prefix, v.Message)
			}
			if !strings.HasPrefix(strings.TrimPrefix(v.MessageExpression, "variables."), "'"+prefix) && !strings.Contains(v.MessageExpression, "'"+prefix) {
				t.Errorf("%s: spec.validations[%d].messageExpression must build a message starting with %q", pol.Name, i, prefix)
			}
		}
		if b.Name != pol.Name+"-binding" || b.Spec.PolicyName != pol.Name {
			t.Errorf("binding %s for policy %s: want binding %s-binding naming its policy (contract §4.1)", b.Name, b.Spec.PolicyName, pol.Name)
		}
		if len(b.Spec.ValidationActions) != 1 || b.Spec.ValidationActions[0] != admissionregistrationv1.Deny {
			t.Errorf("%s: validationActions must be [Deny], got %v", b.Name, b.Spec.ValidationActions)
		}
		if (pol.Spec.ParamKind != nil) != (b.Spec.ParamRef != nil) {
			t.Errorf("%s: a policy with paramKind needs a binding with paramRef and vice versa", b.Name)
		}
		if b.Spec.ParamRef != nil && (b.Spec.ParamRef.Name != "sandbox-fence" || b.Spec.ParamRef.Namespace != "" || b.Spec.ParamRef.ParameterNotFoundAction == nil) {
			t.Errorf("%s: paramRef must name the cluster-scoped FenceConfig sandbox-fence (no namespace) with an explicit parameterNotFoundAction", b.Name)
		}
	}
}
