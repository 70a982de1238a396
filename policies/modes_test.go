package policies_test

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"

	"github.com/sandbox-fence/sandbox-fence/internal/enforcement"
	"github.com/sandbox-fence/sandbox-fence/internal/vapeval"
)

// validationFailureKey is where the API server records a violation under an
// Audit binding.
const validationFailureKey = "validation.policy.admission.k8s.io/validation_failure"

// inMode is the bundle as the enforcement component of m installs it: every
// binding's validationActions and every policy's failurePolicy from
// internal/enforcement's table (TestComponentsApplyTheModeTable holds the
// components to the same table).
func inMode(bundle []*vapeval.PolicyDir, m enforcement.Mode) []*vapeval.PolicyDir {
	var out []*vapeval.PolicyDir
	for _, p := range bundle {
		c := &vapeval.PolicyDir{Dir: p.Dir, Policy: p.Policy.DeepCopy(), Binding: p.Binding.DeepCopy()}
		fp := m.FailurePolicy(*p.Policy.Spec.FailurePolicy)
		c.Policy.Spec.FailurePolicy = &fp
		c.Binding.Spec.ValidationActions = m.ValidationActions()
		out = append(out, c)
	}
	return out
}

// TestPolicyCasesInEveryMode runs every case of TestPolicyCases again under
// the Warn and Audit bundles and checks the verdict each mode implies from
// the case's Deny verdict, so no case is written twice:
//   - nothing is refused;
//   - a write the policies deny in Deny mode is recorded in the audit log
//     (validation_failure) with the same message, and, in Warn only, sent
//     back as a warning carrying it;
//   - a write Deny admits gets no warning and no validation_failure;
//   - a Deny refusal that is a configuration error (a missing FenceConfig)
//     is neither: failurePolicy Ignore admits it silently;
//   - the policies' own audit annotations are those of Deny mode.
func TestPolicyCasesInEveryMode(t *testing.T) {
	bundle := loadBundle(t)
	deny := suite(t)
	for _, m := range []enforcement.Mode{enforcement.Warn, enforcement.Audit} {
		observing := suite(t)
		observing.Bundle = inMode(bundle, m)
		checked := map[string]int{}
		for _, dir := range policyDirs(t) {
			cases, err := vapeval.LoadCases(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cases {
				t.Run(string(m)+"/"+dir+"/"+c.Name(), func(t *testing.T) {
					ctx := context.Background()
					req, err := c.Request.BuildRequest()
					if err != nil {
						t.Fatal(err)
					}
					want := harness(t, deny, c.Params).Evaluate(ctx, req)
					got := harness(t, observing, c.Params).Evaluate(ctx, req)
					if got.Err != nil {
						t.Fatalf("%s: refused in %s mode: %v", c.File, m, got.Err)
					}
					own := func(a map[string]string) map[string]string {
						o := maps.Clone(a)
						delete(o, validationFailureKey)
						return o
					}
					if !maps.EqualFunc(own(want.AuditAnnotations), own(got.AuditAnnotations), sameMessage) {
						t.Errorf("%s: audit annotations %v in %s mode, %v in deny mode", c.File, got.AuditAnnotations, m, want.AuditAnnotations)
					}
					msg, violated := violation(want.Err)
					failures := failureMessages(t, got.AuditAnnotations[validationFailureKey])
					switch {
					case !violated:
						checked["admitted or config error"]++
						if len(got.Warnings) > 0 || len(failures) > 0 {
							t.Errorf("%s: deny mode %v, but %s mode warned %q and recorded %q", c.File, want.Err, m, got.Warnings, failures)
						}
					default:
						checked["violation"]++
						if !slices.ContainsFunc(failures, func(f string) bool { return sameMessage(f, msg) }) {
							t.Errorf("%s: %s mode recorded validation failures %q, want one with %q", c.File, m, failures, msg)
						}
						warned := false
						for _, w := range got.Warnings {
							_, carried, _ := strings.Cut(w, "': ")
							warned = warned || sameMessage(carried, msg)
						}
						if warned != (m == enforcement.Warn) {
							t.Errorf("%s: %s mode warnings %q; want a warning carrying %q only in warn mode", c.File, m, got.Warnings, msg)
						}
					}
				})
			}
		}
		if checked["violation"] == 0 || checked["admitted or config error"] == 0 {
			t.Errorf("%s mode: %v cases of each kind; both kinds must be exercised", m, checked)
		}
	}
}

// violation returns the message of a policy's own denial: what follows
// "denied request: ", unless that is the plugin's configuration error.
func violation(err error) (string, bool) {
	if err == nil {
		return "", false
	}
	_, msg, ok := strings.Cut(err.Error(), " denied request: ")
	if !ok || strings.HasPrefix(msg, "failed to configure") {
		return "", false
	}
	return msg, true
}

func failureMessages(t *testing.T, raw string) []string {
	t.Helper()
	if raw == "" {
		return nil
	}
	var vs []validating.ValidationFailureValue
	if err := json.Unmarshal([]byte(raw), &vs); err != nil {
		t.Fatalf("%s: %v", validationFailureKey, err)
	}
	var out []string
	for _, v := range vs {
		out = append(out, v.Message)
	}
	return out
}

// sameMessage compares two messages up to the order of the words they hold:
// the policies list an object's keys as CEL iterates a map, which differs
// from one evaluation to the next ("it has port, protocol" / "it has
// protocol, port").
func sameMessage(a, b string) bool {
	words := func(s string) []string {
		w := strings.FieldsFunc(s, func(r rune) bool { return strings.ContainsRune(" ,{}()", r) })
		slices.Sort(w)
		return w
	}
	return slices.Equal(words(a), words(b))
}
