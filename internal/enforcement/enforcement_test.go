package enforcement_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/sandbox-fence/sandbox-fence/internal/enforcement"
	tst "github.com/sandbox-fence/sandbox-fence/internal/testing"
)

const configDir = "../../config"

// component is the kustomize component of a mode; Deny needs none.
func component(m enforcement.Mode) []string {
	if m == enforcement.Deny {
		return nil
	}
	return []string{"components/enforcement/" + string(m)}
}

// rendered is what one mode sets on every object the switch touches.
type rendered struct {
	Bindings map[string][]admissionregistrationv1.ValidationAction
	Policies map[string]admissionregistrationv1.FailurePolicyType
	Webhooks map[string]admissionregistrationv1.FailurePolicyType
}

func render(t *testing.T, m enforcement.Mode, extra ...string) rendered {
	t.Helper()
	out := rendered{
		Bindings: map[string][]admissionregistrationv1.ValidationAction{},
		Policies: map[string]admissionregistrationv1.FailurePolicyType{},
		Webhooks: map[string]admissionregistrationv1.FailurePolicyType{},
	}
	objs := tst.Render(t, configDir, "default", append(extra, component(m)...)...)
	for _, o := range objs {
		switch o.GetKind() {
		case "ValidatingAdmissionPolicyBinding":
			var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
			tst.Find(t, objs, o.GetKind(), o.GetName(), &b)
			out.Bindings[b.Name] = b.Spec.ValidationActions
		case "ValidatingAdmissionPolicy":
			var p admissionregistrationv1.ValidatingAdmissionPolicy
			tst.Find(t, objs, o.GetKind(), o.GetName(), &p)
			out.Policies[p.Name] = *p.Spec.FailurePolicy
		case "ValidatingWebhookConfiguration":
			var w admissionregistrationv1.ValidatingWebhookConfiguration
			tst.Find(t, objs, o.GetKind(), o.GetName(), &w)
			for _, h := range w.Webhooks {
				out.Webhooks[h.Name] = *h.FailurePolicy
			}
		}
	}
	return out
}

// TestComponentsApplyTheModeTable renders config/default in every mode and
// compares each binding, policy and webhook with what internal/enforcement
// says the mode sets, starting from what the Deny rendering (the shipped
// YAML) carries. A binding or webhook added later without the component
// learning about it fails here. The opt-in strict-delete component, listed
// before the mode's component as docs/install.md says, is switched too.
func TestComponentsApplyTheModeTable(t *testing.T) {
	for _, extra := range [][]string{nil, {"vap/components/strict-delete"}} {
		deny := render(t, enforcement.Deny, extra...)
		if len(deny.Bindings) == 0 || len(deny.Policies) == 0 || len(deny.Webhooks) == 0 {
			t.Fatalf("config/default renders no bindings, policies or webhooks: %+v", deny)
		}
		if extra != nil && deny.Bindings["sandbox-fence-strict-delete-binding"] == nil {
			t.Fatalf("config/default with %v renders no strict-delete binding: %+v", extra, deny.Bindings)
		}
		for _, m := range enforcement.Modes {
			t.Run(fmt.Sprintf("%s%v", m, extra), func(t *testing.T) {
				want := rendered{
					Bindings: map[string][]admissionregistrationv1.ValidationAction{},
					Policies: map[string]admissionregistrationv1.FailurePolicyType{},
					Webhooks: map[string]admissionregistrationv1.FailurePolicyType{},
				}
				for n := range deny.Bindings {
					want.Bindings[n] = m.ValidationActions()
				}
				for n, fp := range deny.Policies {
					want.Policies[n] = m.FailurePolicy(fp)
				}
				for n, fp := range deny.Webhooks {
					want.Webhooks[n] = m.FailurePolicy(fp)
				}
				if d := cmp.Diff(want, render(t, m, extra...)); d != "" {
					t.Errorf("config/default with %v and the %s component differs from the mode table (-want +got):\n%s", extra, m, d)
				}
			})
		}
	}
}

func TestModeRoundTrips(t *testing.T) {
	for _, m := range enforcement.Modes {
		got, err := enforcement.Parse(string(m))
		if err != nil || got != m {
			t.Errorf("Parse(%q) = %q, %v", m, got, err)
		}
		if got, ok := enforcement.Of(m.ValidationActions()); !ok || got != m {
			t.Errorf("Of(%v) = %q, %v; want %q", m.ValidationActions(), got, ok, m)
		}
	}
	for _, bad := range []string{"", "Deny", "dryrun", "enforce"} {
		if _, err := enforcement.Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
	for _, odd := range [][]admissionregistrationv1.ValidationAction{nil, {"Warn"}, {"Deny", "Warn"}, {"Deny", "Audit"}} {
		if m, ok := enforcement.Of(odd); ok {
			t.Errorf("Of(%v) = %q, want no mode", odd, m)
		}
	}
	if got, ok := enforcement.Of([]admissionregistrationv1.ValidationAction{"Audit", "Warn"}); !ok || got != enforcement.Warn {
		t.Errorf("Of([Audit Warn]) = %q, %v; want warn (order does not matter)", got, ok)
	}
}
