package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

// -egress-before puts the frozen egress policy's configuration beside the
// VAPs it is compared with, and nowhere else.
func TestEgressBeforeIsMeasuredRightAfterTheVAPsItIsComparedWith(t *testing.T) {
	names := func(cs []config) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Name)
		}
		return out
	}
	if diff := cmp.Diff([]string{"none", "vaps", "vaps-before-cut", "vaps+webhook"}, names(configsFor(false, true))); diff != "" {
		t.Errorf("configurations with -egress-before (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"none", "vaps", "vaps+webhook"}, names(configsFor(false, false))); diff != "" {
		t.Errorf("configurations without it (-want +got):\n%s", diff)
	}
}

// Exactly one egress policy is bound in a configuration with the VAPs: the
// frozen one in vaps-before-cut, the shipped one elsewhere; every other
// shipped binding follows VAPs alone.
func TestEachConfigurationBindsExactlyOneEgressPolicy(t *testing.T) {
	binding := func(name, policy string) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
		return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy},
		}
	}
	s := &switcher{
		bindings: []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			binding("epoch-binding", framework.PolicyHolderEpoch),
			binding("egress-binding", framework.PolicyCiliumEgress),
		},
		before: binding("before-binding", egressBeforeName),
	}
	got := map[string][]string{}
	for _, c := range configsFor(false, true) {
		for _, b := range s.bindingsFor() {
			if s.bound(c, b) {
				got[c.Name] = append(got[c.Name], b.Name)
			}
		}
	}
	want := map[string][]string{
		"vaps":            {"epoch-binding", "egress-binding"},
		"vaps-before-cut": {"epoch-binding", "before-binding"},
		"vaps+webhook":    {"epoch-binding", "egress-binding"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("bindings per configuration (-want +got):\n%s", diff)
	}
}
