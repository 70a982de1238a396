package policies_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// CEL has no user-defined functions, so an expression that every list item
// needs is written out at each place that walks such a list. In
// sandbox-fence-cilium-egress these are the DNS-name grammar, the
// *.<domain> pattern grammar and the way a quoted value is cut. Flattening
// spec.egress into one list per kind would let each be written once, but
// it cost about 45% more CEL on the largest admitted body, past
// TestCELCost's bound, so the copies stay.
//
// TestTheEgressPolicysRepeatedExpressionsAreCopiesOfOne makes them copies
// of one definition, held here: every occurrence must be that definition
// with only the value it applies to (and, for a cut, its limit) changed, and
// no partial copy (the grammar's first test without the rest) may exist. A
// copy edited in one place, the way repeats drift, fails it.
func TestTheEgressPolicysRepeatedExpressionsAreCopiesOfOne(t *testing.T) {
	var policy *admissionregistrationv1.ValidatingAdmissionPolicy
	for _, p := range loadBundle(t) {
		if p.Policy.Name == "sandbox-fence-cilium-egress" {
			policy = p.Policy
		}
	}
	if policy == nil {
		t.Fatal("sandbox-fence-cilium-egress not in the bundle")
	}
	var exprs []string
	for _, v := range policy.Spec.Variables {
		exprs = append(exprs, v.Expression)
	}
	for _, v := range policy.Spec.Validations {
		exprs = append(exprs, v.Expression, v.MessageExpression)
	}
	for _, a := range policy.Spec.AuditAnnotations {
		exprs = append(exprs, a.ValueExpression)
	}
	// Whitespace is not meaning: the policy breaks long lines anywhere
	// between tokens.
	text := strings.Join(strings.Fields(strings.Join(exprs, "\n")), " ")

	const value = `([a-zA-Z][\w.\[\]']*)`
	for _, d := range []struct {
		name string
		// definition is the one expression, with V for the value it
		// applies to and N for its limit (a number, or the variable of
		// the one cut that serves every limit, shown).
		definition string
		// marker is a piece every copy holds, so that a copy that no
		// longer matches definition is still counted.
		marker string
		// want is how many copies the policy holds.
		want int
	}{{
		name:       "the DNS-name grammar",
		definition: `V.size() >= 1 && V.size() <= 253 && V.matches('^[-.a-z0-9]+$') && !V.matches('^[-.]|[-.]$|[.][-.]|-[.]|[^.]{64}|(^|[.])[0-9]+$')`,
		marker:     `.matches('^[-.a-z0-9]+$')`,
		want:       8,
	}, {
		name:       "the *.<domain> pattern grammar",
		definition: `V.size() >= 5 && V.size() <= 255 && V.matches('^[*][.][a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)+$') && !V.matches('[^.]{64}') && !V.matches('[.][0-9]+$')`,
		marker:     `.matches('^[*][.]`,
		want:       8,
	}, {
		name:       "the cut of a quoted value",
		definition: `V.size() <= N ? V : V.size() <= 4096 ? V.substring(0, N) + '...' : '<' + string(V.size()) + ' characters>'`,
		marker:     `<= 4096 ?`,
		want:       14,
	}} {
		pattern := regexp.QuoteMeta(d.definition)
		pattern = strings.ReplaceAll(pattern, "V", value)
		pattern = strings.ReplaceAll(pattern, "N", `(\d+|[a-z]\w*)`)
		re := regexp.MustCompile(pattern)
		copies := 0
		for _, m := range re.FindAllStringSubmatch(text, -1) {
			copies++
			var v, n string
			// The groups alternate between values and limits in the
			// order definition names them.
			for i, g := range m[1:] {
				isLimit := placeholderAt(d.definition, i) == 'N'
				switch {
				case isLimit && n == "":
					n = g
				case isLimit && g != n:
					t.Errorf("%s: a copy cuts at %s and at %s: %s", d.name, n, g, m[0])
				case !isLimit && v == "":
					v = g
				case !isLimit && g != v:
					t.Errorf("%s: a copy applies to %s and to %s, not one value: %s", d.name, v, g, m[0])
				}
			}
		}
		if all := strings.Count(text, d.marker); all != copies {
			t.Errorf("%s: %d places hold %q but only %d are the definition %s; make the others copies of it", d.name, all, d.marker, copies, d.definition)
		}
		if copies != d.want {
			t.Errorf("%s: %d copies, want %d; if one was added or folded away, change want here (and say why in the commit)", d.name, copies, d.want)
		}
	}
}

// placeholderAt returns the i-th placeholder (V or N) of definition.
func placeholderAt(definition string, i int) byte {
	return definition[nthPlaceholder(definition, i)]
}

// nthPlaceholder returns the index of the i-th V or N of definition.
func nthPlaceholder(definition string, i int) int {
	for j := 0; j < len(definition); j++ {
		if definition[j] == 'V' || definition[j] == 'N' {
			if i == 0 {
				return j
			}
			i--
		}
	}
	panic(fmt.Sprintf("definition %q has fewer placeholders than its pattern's groups", definition))
}
