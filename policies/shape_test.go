package policies_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sandbox-fence/sandbox-fence/internal/policyconfig"
	"github.com/sandbox-fence/sandbox-fence/internal/vapeval"
)

// TestShapeOKMatchesTheProblemLists proves the fast path of the egress
// policy keeps every rule's meaning: its variable shapeOK, which lets a
// valid body skip the four problem lists (ruleProblems, fqdnProblems,
// fqdnPortProblems, dnsRuleProblems), is true exactly when those lists,
// built in full, are empty (or the body is beyond the size bounds, where
// they are empty by definition and the bounds validation refuses it).
// shapeOK true on a body a list refuses would admit it, the hole this
// test exists for; shapeOK false on a valid body only costs time, and is
// caught too, since then the fast path would be dead.
//
// It runs on every case of the bundle, the adversarial bodies of
// TestCELCost, and every single mutation of the egress rules of the
// admitted cases (a key removed, an unknown key added, a value replaced by
// each of a set of edge values, a list emptied or an item repeated).
func TestShapeOKMatchesTheProblemLists(t *testing.T) {
	// Rendered with the default configuration; inputs of another are
	// skipped (their requests are the same shapes).
	def := caseConfig(t, defaultParams(t), vapeval.CaseParams{})
	policy := policyconfig.Render(bundledPolicy(t, "sandbox-fence-cilium-egress"), def)
	// The lists in full: shapeOK forced false, its expression kept as
	// shapeOKUnderTest.
	found := false
	for i, v := range policy.Spec.Variables {
		if v.Name == "shapeOK" {
			found = true
			policy.Spec.Variables[i].Expression = "false"
			policy.Spec.Variables = append(policy.Spec.Variables, admissionregistrationv1.Variable{Name: "shapeOKUnderTest", Expression: v.Expression})
		}
	}
	if !found {
		t.Fatal("sandbox-fence-cilium-egress has no variable shapeOK")
	}
	policy.Spec.MatchConditions = nil
	policy.Spec.AuditAnnotations = nil
	policy.Spec.Validations = []admissionregistrationv1.Validation{{Expression: `string(variables.shapeOKUnderTest) + ' ' +
		string(!variables.hasSpec || variables.bounded && variables.ruleProblems.size() == 0 && variables.fqdnProblems.size() == 0 &&
		variables.fqdnPortProblems.size() == 0 && variables.dnsRuleProblems.size() == 0)`}}
	exprs, err := vapeval.CompileExpressions(policy)
	if err != nil {
		t.Fatal(err)
	}
	var check *vapeval.Expression
	for _, e := range exprs {
		if e.Kind == "validation" {
			check = e
		}
	}
	nss := map[string]*corev1.Namespace{}
	for _, ns := range namespaces(t) {
		nss[ns.Name] = ns
	}
	cases := caseInputs(t)
	inputs := append(append(cases, adversarialInputs(t)...), egressMutants(t, cases)...)
	ctx := context.Background()
	checked, fast, invalid := 0, 0, 0
	for _, in := range inputs {
		if !matches(policy, in.req) || in.config.Expression() != def.Expression() || in.req.Resource.Resource != "ciliumnetworkpolicies" {
			continue
		}
		ev := check.Evaluate(ctx, in.req, nil, nss[in.req.Namespace])
		if ev.Err != nil && strings.HasPrefix(in.name, "mutant: ") && strings.Contains(ev.Err.Error(), "no such overload") {
			// A mutation that puts a value of the wrong type where the
			// CRD schema allows only another: the API server refuses
			// such a body before admission, so no CEL ever sees it.
			invalid++
			continue
		}
		if ev.Err != nil {
			t.Errorf("%s: %v", in.name, ev.Err)
			continue
		}
		var shapeOK, empty bool
		if _, err := fmt.Sscanf(fmt.Sprint(ev.Value), "%t %t", &shapeOK, &empty); err != nil {
			t.Fatalf("%s: %#v: %v", in.name, ev.Value, err)
		}
		checked++
		if shapeOK {
			fast++
		}
		if shapeOK != empty {
			t.Errorf("%s: shapeOK = %v, but the problem lists built in full are empty = %v", in.name, shapeOK, empty)
		}
	}
	t.Logf("%d CiliumNetworkPolicy requests checked, %d of them on the fast path; %d mutants of a type the schema refuses skipped", checked, fast, invalid)
	if checked < 1000 || fast < 50 || fast == checked {
		t.Errorf("checked %d requests, %d on the fast path: the inputs do not exercise both paths", checked, fast)
	}
}

// egressMutants derives, from every admitted CREATE or UPDATE of a
// CiliumNetworkPolicy among inputs, one request per single mutation of its
// spec.egress.
func egressMutants(t *testing.T, inputs []costInput) []costInput {
	t.Helper()
	var out []costInput
	seen := map[string]bool{}
	sources := map[string]bool{}
	for _, in := range inputs {
		obj, ok := in.req.Object.(*unstructured.Unstructured)
		if !ok || in.req.Resource.Resource != "ciliumnetworkpolicies" || obj == nil || !strings.HasSuffix(in.name, "-admitted") {
			continue
		}
		spec, _ := obj.Object["spec"].(map[string]any)
		egress, _ := spec["egress"].([]any)
		if len(egress) == 0 || sources[fmt.Sprint(egress)] {
			continue
		}
		sources[fmt.Sprint(egress)] = true
		for _, m := range mutate(any(egress), "egress") {
			key := fmt.Sprintf("%v", m.value)
			if seen[key] {
				continue
			}
			seen[key] = true
			o := &unstructured.Unstructured{Object: deepCopy(obj.Object).(map[string]any)}
			o.Object["spec"].(map[string]any)["egress"] = m.value
			req := in.req
			req.Object = o
			out = append(out, costInput{name: "mutant: " + in.name + " with " + m.what, req: req, config: in.config})
		}
	}
	return out
}

type mutant struct {
	what  string
	value any
}

// edgeStrings are the values the fence's name, port and protocol checks
// turn on.
var edgeStrings = []string{"", "*", "**", "*.com", "*.example.com", "*.*.com", "example.com", "a..com", "-a.com", "a-.com",
	"Example.com", "example.com.", "10.0.0.1", "a.b.c.123", "_x.example.com", strings.Repeat("a", 63) + ".com", strings.Repeat("a", 64) + ".com", "*." + strings.Repeat("a", 64) + ".com",
	"53", "443", "0", "65535", "65536", "053", "http", "TCP", "UDP", "ANY", "SCTP", "kube-system", "kube-dns"}

var edgeInts = []int64{0, 52, 53, 54, 443, 444, 65535, 65536}

// mutate returns every single mutation of v (a JSON value), each as the
// whole mutated value.
func mutate(v any, path string) []mutant {
	var out []mutant
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			c := deepCopy(x).(map[string]any)
			delete(c, k)
			out = append(out, mutant{path + " without " + k, c})
			for _, m := range mutate(x[k], path+"."+k) {
				c := deepCopy(x).(map[string]any)
				c[k] = m.value
				out = append(out, mutant{m.what, c})
			}
		}
		for _, k := range []string{"x", "toPorts", "rules", "serverNames", "endPort", "protocol", "matchName", "matchPattern", "dns", "toEndpoints", "toFQDNs"} {
			if _, ok := x[k]; ok {
				continue
			}
			c := deepCopy(x).(map[string]any)
			switch k {
			case "endPort":
				c[k] = int64(443)
			case "protocol", "matchName":
				c[k] = "example.com"
			case "matchPattern":
				c[k] = "*.example.com"
			case "rules":
				c[k] = map[string]any{"dns": []any{map[string]any{"matchName": "example.com"}}}
			case "serverNames":
				c[k] = []any{"example.com"}
			case "x":
				c[k] = "y"
			default:
				c[k] = []any{}
			}
			out = append(out, mutant{path + " with " + k, c})
		}
	case []any:
		if len(x) > 0 {
			out = append(out, mutant{path + " emptied", []any{}})
			c := deepCopy(x).([]any)
			out = append(out, mutant{path + " with its first item twice", append(c, deepCopy(x[0]))})
		}
		for i := range x {
			for _, m := range mutate(x[i], fmt.Sprintf("%s[%d]", path, i)) {
				c := deepCopy(x).([]any)
				c[i] = m.value
				out = append(out, mutant{m.what, c})
			}
		}
	case string:
		for _, s := range edgeStrings {
			if s != x {
				out = append(out, mutant{fmt.Sprintf("%s = %q", path, s), s})
			}
		}
	case int64, int, float64:
		for _, n := range edgeInts {
			if fmt.Sprint(n) != fmt.Sprint(x) {
				out = append(out, mutant{fmt.Sprintf("%s = %d", path, n), n})
			}
		}
	}
	return out
}

// deepCopy copies a decoded JSON or YAML value (the fixtures hold int as
// well as int64, which runtime.DeepCopyJSONValue refuses).
func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		c := make(map[string]any, len(x))
		for k, e := range x {
			c[k] = deepCopy(e)
		}
		return c
	case []any:
		c := make([]any, len(x))
		for i, e := range x {
			c[i] = deepCopy(e)
		}
		return c
	default:
		return x
	}
}

// TestMessageGuards checks the guards of the egress policy's
// messageExpressions (see the comment above its validations): a
// messageExpression that starts with a condition and ? ” : must start
// with its own validation's expression, so the guard can only ever skip a
// message when the validation passed. It also requires the guards to be
// there, on the validations that a write or a DELETE evaluates most.
func TestMessageGuards(t *testing.T) {
	// Rendered with the default configuration; inputs of another are
	// skipped (their requests are the same shapes).
	def := caseConfig(t, defaultParams(t), vapeval.CaseParams{})
	policy := policyconfig.Render(bundledPolicy(t, "sandbox-fence-cilium-egress"), def)
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	guarded := 0
	for i, v := range policy.Spec.Validations {
		msg := norm(v.MessageExpression)
		if !strings.HasPrefix(msg, "(") || !strings.Contains(msg, ") ? '' :") {
			continue
		}
		guarded++
		if want := "(" + norm(v.Expression) + ") ? '' :"; !strings.HasPrefix(msg, want) {
			t.Errorf("spec.validations[%d].messageExpression: its guard is not its validation's expression:\n got %.200s\nwant %s", i, msg, want)
		}
	}
	if guarded < 10 {
		t.Errorf("%d guarded messageExpressions, want at least 10", guarded)
	}
}
