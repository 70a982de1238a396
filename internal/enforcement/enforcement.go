// Package enforcement names the three modes the fence can run in (deny, warn
// and audit, as docs/contract.md defines them) and what each one means for every shipped object. It is the single
// switch an installer templates: the kustomize components in
// config/components/enforcement apply exactly this table, a test renders
// them and compares against it, and the webhook's --enforcement flag and
// kubectl fence read it.
package enforcement

import (
	"fmt"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// Mode is how a rule violation is acted on.
type Mode string

const (
	// Deny refuses the write with HTTP 422 (the default).
	Deny Mode = "deny"
	// Warn admits the write; the client gets a warning carrying the denial
	// message, and the audit log gets it as an annotation.
	Warn Mode = "warn"
	// Audit admits the write silently; the denial message reaches only the
	// audit log (and the metrics).
	Audit Mode = "audit"
)

// Modes lists every mode, the default first.
var Modes = []Mode{Deny, Warn, Audit}

// Parse reads a mode name, case-sensitively, as the flag and the component
// directories spell it.
func Parse(s string) (Mode, error) {
	m := Mode(s)
	if slices.Contains(Modes, m) {
		return m, nil
	}
	return "", fmt.Errorf("enforcement %q: must be deny, warn or audit", s)
}

// Enforced reports whether a violation refuses the write.
func (m Mode) Enforced() bool { return m == Deny }

// ValidationActions is what every ValidatingAdmissionPolicyBinding of the
// bundle carries in this mode.
func (m Mode) ValidationActions() []admissionregistrationv1.ValidationAction {
	switch m {
	case Warn:
		return []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn, admissionregistrationv1.Audit}
	case Audit:
		return []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit}
	}
	return []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}
}

// FailurePolicy is the failurePolicy of every policy and of the webhook
// configuration in this mode, given what the policy uses in Deny (the
// repair policy is Ignore even then). An observing mode must never refuse
// a write: with Fail, an error (the webhook unreachable, a policy that
// cannot be evaluated) would
// refuse it whatever the bindings' validationActions say, because the API
// server applies validationActions to verdicts, not to errors.
func (m Mode) FailurePolicy(inDeny admissionregistrationv1.FailurePolicyType) admissionregistrationv1.FailurePolicyType {
	if m == Deny {
		return inDeny
	}
	return admissionregistrationv1.Ignore
}

// Of tells the mode from a binding's validationActions; ok is false for a
// set no mode produces (say, [Deny, Warn] or [Warn] alone).
func Of(actions []admissionregistrationv1.ValidationAction) (m Mode, ok bool) {
	sorted := slices.Clone(actions)
	slices.Sort(sorted)
	for _, m := range Modes {
		want := slices.Clone(m.ValidationActions())
		slices.Sort(want)
		if slices.Equal(sorted, want) {
			return m, true
		}
	}
	return "", false
}
