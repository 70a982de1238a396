package policyconfig

import (
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	admissionregistrationv1ac "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
)

// PolicyExpression is the expression policy declares for Variable, and
// whether it declares it at all.
func PolicyExpression(policy *admissionregistrationv1.ValidatingAdmissionPolicy) (string, bool) {
	i := slices.IndexFunc(policy.Spec.Variables, func(v admissionregistrationv1.Variable) bool { return v.Name == Variable })
	if i < 0 {
		return "", false
	}
	return policy.Spec.Variables[i].Expression, true
}

// Render is policy with c rendered into its Variable, as the controller
// leaves it; policy itself is not changed. A policy that declares no
// Variable is returned as it is.
func Render(policy *admissionregistrationv1.ValidatingAdmissionPolicy, c Config) *admissionregistrationv1.ValidatingAdmissionPolicy {
	out := policy.DeepCopy()
	for i := range out.Spec.Variables {
		if out.Spec.Variables[i].Name == Variable {
			out.Spec.Variables[i].Expression = c.Expression()
		}
	}
	return out
}

// PolicyApplyConfiguration is the server-side apply that renders c into the
// policy name: the one field the controller owns, the expression of
// Variable. The variable keeps its place (variables is a map-list keyed by
// name), which matters: a variable may read only those declared before it.
func PolicyApplyConfiguration(name string, c Config) *admissionregistrationv1ac.ValidatingAdmissionPolicyApplyConfiguration {
	return admissionregistrationv1ac.ValidatingAdmissionPolicy(name).WithSpec(
		admissionregistrationv1ac.ValidatingAdmissionPolicySpec().WithVariables(
			admissionregistrationv1ac.Variable().WithName(Variable).WithExpression(c.Expression())))
}

// WebhookExpressions maps each webhook of cfg that declares MatchCondition
// to its expression.
func WebhookExpressions(cfg *admissionregistrationv1.ValidatingWebhookConfiguration) map[string]string {
	out := map[string]string{}
	for _, w := range cfg.Webhooks {
		for _, m := range w.MatchConditions {
			if m.Name == MatchCondition {
				out[w.Name] = m.Expression
			}
		}
	}
	return out
}

// RenderWebhooks is cfg with c rendered into every MatchCondition it
// declares; cfg itself is not changed.
func RenderWebhooks(cfg *admissionregistrationv1.ValidatingWebhookConfiguration, c Config) *admissionregistrationv1.ValidatingWebhookConfiguration {
	out := cfg.DeepCopy()
	for i := range out.Webhooks {
		for j := range out.Webhooks[i].MatchConditions {
			if out.Webhooks[i].MatchConditions[j].Name == MatchCondition {
				out.Webhooks[i].MatchConditions[j].Expression = c.MatchConditionExpression()
			}
		}
	}
	return out
}

// WebhookApplyConfiguration is the server-side apply that renders c into
// the MatchCondition of the named webhooks of the configuration name.
func WebhookApplyConfiguration(name string, webhooks []string, c Config) *admissionregistrationv1ac.ValidatingWebhookConfigurationApplyConfiguration {
	ac := admissionregistrationv1ac.ValidatingWebhookConfiguration(name)
	for _, w := range webhooks {
		ac.WithWebhooks(admissionregistrationv1ac.ValidatingWebhook().WithName(w).WithMatchConditions(
			admissionregistrationv1ac.MatchCondition().WithName(MatchCondition).WithExpression(c.MatchConditionExpression())))
	}
	return ac
}
