package policies_test

import (
	"regexp"
	"strings"
	"testing"
)

// CEL has no user-defined functions, so an expression that every list item
// needs is written out at each place that walks such a list. In
// sandbox-fence-cilium-egress these are the DNS-name grammar and the
// *.<domain> pattern grammar. Flattening spec.egress into one list per kind
// would let each be written once, but it cost about 45% more CEL on the
// largest admitted body (8,145 to 11,883 units, measured 2026-12-03), so
// the copies stay.
//
// The cut of a quoted value is written once: every message that quotes a
// value is a list of segments ([text], or [value, limit] to cut), and the
// variable shown renders them all, the validations' quoted values and the
// egress problem lists' items, in one comprehension. The API server limits
// each variable as a program of its own, so shown's own cost is only the
// rendering (3,302 units at most, 0.33% of the per-call limit, TestCELCost
// 2026-12-04). Only a refused write's messages and audit annotations read
// it, so an admitted write pays nothing for it (BenchmarkVAPs).
//
// TestTheEgressPolicysRepeatedExpressionsAreCopiesOfOne makes them copies
// of one definition, held here: every occurrence must be that definition
// with only the value it applies to (and, for a cut, its limit) changed, and
// no partial copy (the grammar's first test without the rest) may exist. A
// copy edited in one place, the way repeats drift, fails it.
func TestTheEgressPolicysRepeatedExpressionsAreCopiesOfOne(t *testing.T) {
	exprs := policyExpressions(bundledPolicy(t, "sandbox-fence-cilium-egress"))
	// Whitespace is not meaning: the policy breaks long lines anywhere
	// between tokens.
	text := strings.Join(strings.Fields(strings.Join(exprs, "\n")), " ")

	const value = `(?P<V>[a-zA-Z][\w.\[\]']*)`
	for _, d := range []struct {
		name string
		// definition is the one expression, with V for the value it
		// applies to and N for its limit (a number, or, in the one cut
		// that serves every limit, shown, the segment's limit).
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
		want:       1,
	}} {
		// Every V is a group named V and every N one named N, so a copy
		// is checked for one value and one limit throughout.
		pattern := regexp.QuoteMeta(d.definition)
		pattern = strings.ReplaceAll(pattern, "V", value)
		pattern = strings.ReplaceAll(pattern, "N", `(?P<N>\d+|[a-z]\w*(?:\(\w+\[\d+\]\))?)`)
		re := regexp.MustCompile(pattern)
		copies := 0
		for _, m := range re.FindAllStringSubmatch(text, -1) {
			copies++
			first := map[string]string{}
			for i, name := range re.SubexpNames()[1:] {
				g := m[i+1]
				if f, ok := first[name]; !ok {
					first[name] = g
				} else if g != f {
					t.Errorf("%s: a copy reads %s as both %s and %s: %s", d.name, name, f, g, m[0])
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
