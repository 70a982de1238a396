package vapeval

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The verdict comparison is what every case relies on; these show it fails
// when it should.
func TestCaseProblems(t *testing.T) {
	denied := func(msgs ...string) *Case {
		return &Case{Expect: Expect{Code: 422, Messages: msgs, Policy: "p"}}
	}
	const prefix = `x "y" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'p-binding' denied request: `
	tests := []struct {
		name string
		c    *Case
		v    Verdict
		want []string
	}{
		{"an expected denial with its code, message and policy has no problem", denied("holder-epoch: a"),
			Verdict{Code: 422, Reason: metav1.StatusReasonInvalid, Message: prefix + "holder-epoch: a b"}, nil},
		{"an admission where a denial is expected is a problem", denied("holder-epoch: a"),
			Verdict{Allowed: true}, []string{"admitted, want denied"}},
		{"a denial where an admission is expected is a problem", &Case{Expect: Expect{Allowed: true}},
			Verdict{Code: 422, Reason: metav1.StatusReasonInvalid, Message: prefix + "holder-epoch: a"},
			[]string{"denied (422 Invalid): " + prefix + "holder-epoch: a; want admitted"}},
		{"a missing substring, another policy, a wrong code and an unprefixed 403 are all reported", denied("zzz"),
			Verdict{Code: 403, Reason: metav1.StatusReasonForbidden, Message: `x "y" is forbidden: ValidatingAdmissionPolicy 'q' with binding 'q-binding' denied request: oops`},
			[]string{
				`code 403, want 422 (message: x "y" is forbidden: ValidatingAdmissionPolicy 'q' with binding 'q-binding' denied request: oops)`,
				`message "x \"y\" is forbidden: ValidatingAdmissionPolicy 'q' with binding 'q-binding' denied request: oops" does not contain "zzz"`,
				`message "x \"y\" is forbidden: ValidatingAdmissionPolicy 'q' with binding 'q-binding' denied request: oops" is not from policy p`,
				`a policy denial must start with holder-epoch: or cilium-fence: (contract §8.1): x "y" is forbidden: ValidatingAdmissionPolicy 'q' with binding 'q-binding' denied request: oops`,
				`a policy denial must be 422 Invalid (contract §8.1), got 403 Forbidden`,
			}},
		{"a compilation error fails even an admitted case", &Case{Expect: Expect{Allowed: true}},
			Verdict{Allowed: true, Message: "compilation error: x"}, []string{"the policy did not compile: compilation error: x"}},
		{"the plugin's own missing-param denial needs no family prefix", denied("failed to configure binding"),
			Verdict{Code: 422, Reason: metav1.StatusReasonInvalid, Message: prefix + "failed to configure binding: no params found"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.c.Problems(tt.v)); diff != "" {
				t.Errorf("Problems (-want +got):\n%s", diff)
			}
		})
	}
}
