package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const repoRoot = "../.."

func generated(t *testing.T) map[string]Mutant {
	t.Helper()
	ms, err := Generate(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Mutant{}
	for _, m := range ms {
		out[m.ID] = m
	}
	return out
}

func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// wantEdit fails unless m's file differs from the committed one exactly by
// edit, applied to the decoded committed file.
func wantEdit(t *testing.T, m Mutant, edit func(doc any) error) {
	t.Helper()
	orig, err := os.ReadFile(filepath.Join(repoRoot, m.File))
	if err != nil {
		t.Fatal(err)
	}
	if string(orig) == string(m.Mutated) {
		t.Errorf("%s: the mutant does not change %s", m.ID, m.File)
	}
	o, got := decode(t, orig), decode(t, m.Mutated)
	if err := edit(o); err != nil {
		t.Fatalf("%s: %v", m.ID, err)
	}
	if !reflect.DeepEqual(o, got) {
		t.Errorf("%s: the mutant changes %s otherwise than expected", m.ID, m.File)
	}
}

func set(path []any, v any) func(any) error {
	return func(doc any) error { return setPath(doc, path, v) }
}

func del(path ...any) func(any) error {
	return func(doc any) error { return deletePath(doc, path) }
}

// want is one mutant a family expects: its ID, file and edit.
type want struct {
	id, file string
	edit     func(any) error
}

type shippedPolicy struct {
	name, rel, brel string
	doc, bdoc       map[string]any
}

func shipped(t *testing.T) ([]shippedPolicy, map[string]any) {
	t.Helper()
	policies, err := filepath.Glob(filepath.Join(repoRoot, "policies", "*", "policy.yaml"))
	if err != nil || len(policies) < 5 {
		t.Fatalf("want the five shipped policies, found %v (%v)", policies, err)
	}
	var out []shippedPolicy
	for _, p := range policies {
		name := filepath.Base(filepath.Dir(p))
		sp := shippedPolicy{name: name, rel: "policies/" + name + "/policy.yaml", brel: "policies/" + name + "/binding.yaml"}
		if _, err := os.Stat(filepath.Join(repoRoot, sp.brel)); err != nil {
			sp.brel = "policies/" + name + "/binding/binding.yaml"
		}
		for _, f := range []struct {
			rel string
			doc *map[string]any
		}{{sp.rel, &sp.doc}, {sp.brel, &sp.bdoc}} {
			b, err := os.ReadFile(filepath.Join(repoRoot, f.rel))
			if err != nil {
				t.Fatal(err)
			}
			*f.doc = decode(t, b)
		}
		out = append(out, sp)
	}
	b, err := os.ReadFile(filepath.Join(repoRoot, webhookConfig))
	if err != nil {
		t.Fatal(err)
	}
	return out, decode(t, b)
}

func items(doc any, path ...any) []any {
	s, _ := getPath(doc, path...).([]any)
	return s
}

// TestEveryShippedRuleHasAMutant reads the shipped files on its own and
// requires, family by family, the mutants each rule should have, each
// changing exactly what it says: a rule added to the bundle is mutated, and
// no family can shrink or vanish without this test failing. Every YAML
// mutant the generator makes must be one a family expects.
func TestEveryShippedRuleHasAMutant(t *testing.T) {
	ms := generated(t)
	policies, vwc := shipped(t)
	hooks := items(vwc, "webhooks")
	if len(hooks) == 0 {
		t.Fatalf("%s: no webhook entries", webhookConfig)
	}
	// perPolicy and perHook make a family from what one policy or one
	// webhook entry should have.
	perPolicy := func(f func(p shippedPolicy, spec []any) []want) func() []want {
		return func() []want {
			var out []want
			for _, p := range policies {
				out = append(out, f(p, []any{"spec"})...)
			}
			return out
		}
	}
	perHook := func(f func(id string, e []any) []want) func() []want {
		return func() []want {
			var out []want
			for i := range hooks {
				out = append(out, f(fmt.Sprintf("webhook %v", getPath(vwc, "webhooks", i, "name")), []any{"webhooks", i})...)
			}
			return out
		}
	}
	at := func(base []any, p ...any) []any { return append(append([]any{}, base...), p...) }
	conditions := func(doc any, id, file string, base []any) []want {
		var out []want
		for j := range items(doc, at(base, "matchConditions")...) {
			for _, v := range []string{"false", "true"} {
				if getPath(doc, at(base, "matchConditions", j, "expression")...) == v {
					continue // already: no mutant
				}
				out = append(out, want{fmt.Sprintf("%s/matchConditions[%d] %s=%s", id, j, getPath(doc, at(base, "matchConditions", j, "name")...), v), file,
					set(at(base, "matchConditions", j, "expression"), v)})
			}
		}
		return out
	}
	flip := func(doc any, path []any) string {
		if getPath(doc, path...) == "Ignore" {
			return "Fail"
		}
		return "Ignore"
	}
	rulesDropped := func(doc any, prefix, file string, rules []any) []want {
		var out []want
		if n := len(items(doc, rules...)); n > 1 {
			for r := range n {
				out = append(out, want{fmt.Sprintf("%s%v[%d] dropped", prefix, rules[len(rules)-1], r), file, del(at(rules, r)...)})
			}
		}
		return out
	}
	opsDropped := func(doc any, prefix, file string, rules []any) []want {
		var out []want
		for r := range items(doc, rules...) {
			ops := items(doc, at(rules, r, "operations")...)
			for o := range ops {
				if len(ops) > 1 {
					out = append(out, want{fmt.Sprintf("%s%v[%d] without %v", prefix, rules[len(rules)-1], r, ops[o]), file, del(at(rules, r, "operations", o)...)})
				}
			}
		}
		return out
	}
	// The variables that must have their constants (the list): the
	// generator's reading of CEL types must keep finding them.
	mustVariables := []string{
		"cilium-egress-fence/variables.fenced=true", "cilium-egress-fence/variables.fenced=false",
		"cilium-egress-fence/variables.optedIn=true", "cilium-egress-fence/variables.optedIn=false",
		"cilium-egress-fence/variables.rendered=true", "cilium-egress-fence/variables.rendered=false",
		"cilium-egress-fence/variables.boundHost=true", "cilium-egress-fence/variables.boundHost=false",
		"cilium-egress-fence/variables.ownNamespace=true", "cilium-egress-fence/variables.ownNamespace=false",
		"cilium-egress-fence/variables.namespaceHosts=[]",
		"strict-delete/variables.strict=true", "strict-delete/variables.strict=false",
		"holder-epoch-repair/variables.breakGlass=true", "holder-epoch-repair/variables.breakGlass=false",
		"holder-epoch-repair/variables.isHost=true", "holder-epoch-repair/variables.isHost=false",
		"holder-epoch/variables.newWell=false", "holder-epoch/variables.oldWell=false",
	}

	families := []struct {
		name string
		// min is the fewest mutants the shipped bundle gives the family.
		min  int
		want func() []want
	}{{
		name: "each policy validation removed", min: 30,
		want: perPolicy(func(p shippedPolicy, spec []any) []want {
			vals := items(p.doc, "spec", "validations")
			if len(vals) == 0 {
				t.Errorf("%s: no validations", p.rel)
			}
			var out []want
			for i := range vals {
				out = append(out, want{fmt.Sprintf("%s/validations[%d]", p.name, i), p.rel, set([]any{"spec", "validations", i, "expression"}, "true")})
			}
			return out
		}),
	}, {
		name: "each policy matchCondition false and true", min: 10,
		want: perPolicy(func(p shippedPolicy, spec []any) []want { return conditions(p.doc, p.name, p.rel, spec) }),
	}, {
		name: "each policy failurePolicy flipped", min: 5,
		want: perPolicy(func(p shippedPolicy, spec []any) []want {
			v := flip(p.doc, at(spec, "failurePolicy"))
			return []want{{p.name + "/failurePolicy=" + v, p.rel, set(at(spec, "failurePolicy"), v)}}
		}),
	}, {
		name: "each policy namespaceSelector dropped", min: 5,
		want: perPolicy(func(p shippedPolicy, spec []any) []want {
			if sel, _ := getPath(p.doc, "spec", "matchConstraints", "namespaceSelector").(map[string]any); len(sel) == 0 {
				return nil
			}
			return []want{{p.name + "/matchConstraints.namespaceSelector dropped", p.rel, del("spec", "matchConstraints", "namespaceSelector")}}
		}),
	}, {
		name: "each policy resourceRule dropped, when another is left", min: 4,
		want: perPolicy(func(p shippedPolicy, spec []any) []want {
			return rulesDropped(p.doc, p.name+"/matchConstraints.", p.rel, []any{"spec", "matchConstraints", "resourceRules"})
		}),
	}, {
		name: "each operation of a policy resourceRule dropped, when another is left", min: 9,
		want: perPolicy(func(p shippedPolicy, spec []any) []want {
			return opsDropped(p.doc, p.name+"/matchConstraints.", p.rel, []any{"spec", "matchConstraints", "resourceRules"})
		}),
	}, {
		name: "each bool policy variable made true and false, each list one empty", min: len(mustVariables),
		want: perPolicy(func(p shippedPolicy, spec []any) []want {
			var out []want
			known := map[string]string{}
			for k := range items(p.doc, "spec", "variables") {
				name, _ := getPath(p.doc, "spec", "variables", k, "name").(string)
				expr, _ := getPath(p.doc, "spec", "variables", k, "expression").(string)
				typ := celType(expr, known)
				known[name] = typ
				base, _, _ := strings.Cut(typ, ":")
				for _, c := range constants[base] {
					out = append(out, want{fmt.Sprintf("%s/variables.%s=%s", p.name, name, c), p.rel, set([]any{"spec", "variables", k, "expression"}, c)})
				}
			}
			return out
		}),
	}, {
		name: "each binding's validationActions [Audit]", min: 5,
		want: perPolicy(func(p shippedPolicy, spec []any) []want {
			return []want{{p.name + "/binding validationActions=[Audit]", p.brel, set([]any{"spec", "validationActions"}, []any{"Audit"})}}
		}),
	}, {
		name: "each webhook rule and operation dropped, when another is left", min: 2,
		want: perHook(func(id string, e []any) []want {
			return append(rulesDropped(vwc, id+"/", webhookConfig, at(e, "rules")), opsDropped(vwc, id+"/", webhookConfig, at(e, "rules"))...)
		}),
	}, {
		name: "each webhook failurePolicy flipped", min: 1,
		want: perHook(func(id string, e []any) []want {
			v := flip(vwc, at(e, "failurePolicy"))
			return []want{{id + "/failurePolicy=" + v, webhookConfig, set(at(e, "failurePolicy"), v)}}
		}),
	}, {
		name: "each webhook timeoutSeconds 30", min: 1,
		want: perHook(func(id string, e []any) []want {
			return []want{{id + "/timeoutSeconds=30", webhookConfig, set(at(e, "timeoutSeconds"), float64(30))}}
		}),
	}, {
		name: "each webhook routes only opted-in namespaces", min: 1,
		want: perHook(func(id string, e []any) []want {
			return []want{{id + "/namespaceSelector=opt-in", webhookConfig, set(at(e, "namespaceSelector"),
				map[string]any{"matchLabels": map[string]any{optInLabel: "true"}})}}
		}),
	}, {
		name: "each webhook routes only labelled policies", min: 1,
		want: perHook(func(id string, e []any) []want {
			return []want{{id + "/objectSelector=per-sandbox-label", webhookConfig, set(at(e, "objectSelector"),
				map[string]any{"matchExpressions": []any{map[string]any{"key": perSandboxLabel, "operator": "Exists"}}})}}
		}),
	}, {
		name: "each webhook matchCondition false and true, unless it already is", min: 1,
		want: perHook(func(id string, e []any) []want { return conditions(vwc, id, webhookConfig, e) }),
	}}
	expected := map[string]bool{}
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			ws := f.want()
			if len(ws) < f.min {
				t.Errorf("%d mutants, want at least %d", len(ws), f.min)
			}
			for _, w := range ws {
				expected[w.id] = true
				m, ok := ms[w.id]
				if !ok {
					t.Errorf("no mutant %s", w.id)
					continue
				}
				if m.File != w.file {
					t.Errorf("%s changes %s, want %s", w.id, m.File, w.file)
				}
				wantEdit(t, m, w.edit)
			}
		})
	}
	for _, id := range mustVariables {
		if !expected[id] {
			t.Errorf("no mutant %s", id)
		}
	}
	var extra []string
	for id, m := range ms {
		if !m.Go && !expected[id] {
			extra = append(extra, id)
		}
	}
	sort.Strings(extra)
	if len(extra) > 0 {
		t.Errorf("mutants no family expects: %v", extra)
	}
}

// TestEveryEarlyAllowedBranchIsTakenAlwaysAndNever parses the handlers on
// its own: each `return admission.Allowed(...)` that is not its function's
// last statement sits in a branch with two mutants, its condition always
// and never true, in source order.
func TestEveryEarlyAllowedBranchIsTakenAlwaysAndNever(t *testing.T) {
	ms := generated(t)
	const file = "internal/webhook/handlers.go"
	src, err := os.ReadFile(filepath.Join(repoRoot, file))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	early := 0
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "Handle" || fn.Body == nil {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			r, ok := n.(*ast.ReturnStmt)
			if ok && len(r.Results) == 1 && strings.HasPrefix(string(src[fset.Position(r.Results[0].Pos()).Offset:]), "admission.Allowed(") &&
				!slices.Contains(fn.Body.List, ast.Stmt(r)) {
				early++
			}
			return true
		})
	}
	if early < 6 {
		t.Fatalf("%s: %d early admission.Allowed returns, want the six of CiliumHandler.Handle", file, early)
	}
	for k := range early {
		for _, tc := range []struct{ taken, marker string }{{"always", ") || true"}, {"never", ") && false"}} {
			id := fmt.Sprintf("webhook.CiliumHandler.Handle allowed#%d=%s", k, tc.taken)
			m, ok := ms[id]
			if !ok {
				t.Errorf("no mutant %s", id)
				continue
			}
			if m.File != file || !m.Go || strings.Count(string(m.Mutated), tc.marker) != strings.Count(string(src), tc.marker)+1 {
				t.Errorf("%s: want %s with one condition ending in %q", id, file, tc.marker)
			}
			if _, err := parser.ParseFile(token.NewFileSet(), file, m.Mutated, 0); err != nil {
				t.Errorf("%s: %v", id, err)
			}
		}
	}
	if _, ok := ms[fmt.Sprintf("webhook.CiliumHandler.Handle allowed#%d=always", early)]; ok {
		t.Errorf("a branch mutant past the %d early returns: the function's last return is no branch", early)
	}
}

// TestListingIsDeterministic: the same bundle lists the same mutants in
// the same order, and the same seed draws the same sample, in that order,
// with no equivalent mutant in it.
func TestListingIsDeterministic(t *testing.T) {
	a, err := Generate(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Generate(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two listings of the same bundle differ")
	}
	s1, s2 := draw(a, 8, "a seed"), draw(a, 8, "a seed")
	if len(s1) != 8 || !reflect.DeepEqual(s1, s2) {
		t.Fatalf("the same seed drew %d and %d mutants, or others", len(s1), len(s2))
	}
	if reflect.DeepEqual(s1, draw(a, 8, "another seed")) {
		t.Error("two seeds drew the same sample")
	}
	pos := -1
	for _, m := range s1 {
		k := slices.IndexFunc(a, func(x Mutant) bool { return x.ID == m.ID })
		if k <= pos {
			t.Errorf("the sample is not in the listing's order at %s", m.ID)
		}
		pos = k
		if m.Equivalent != "" {
			t.Errorf("the sample holds the equivalent %s", m.ID)
		}
	}
	if n := len(draw(a, len(a)+10, "x")); n != len(a)-len(equivalents) {
		t.Errorf("a sample larger than the listing: %d mutants, want the %d that run", n, len(a)-len(equivalents))
	}
}

// fieldErrorConstructors build a *field.Error (k8s.io/apimachinery's
// util/validation/field).
var fieldErrorConstructors = regexp.MustCompile(`^(Required|Invalid|Forbidden|NotSupported|TooMany|TooLong|TooLongMaxLength|NotFound|Duplicate|InternalError|TypeInvalid|Error)$`)

// TestEveryRefusalOfTheWebhookCodeHasAMutant parses the webhook's code on
// its own: every field error built in internal/admit (directly, or through
// a helper returning *field.Error) and every denial built in
// internal/webhook lies inside the statement of a mutant, so a check added
// in a shape the generator does not know fails here instead of being left
// out of the mutation check.
func TestEveryRefusalOfTheWebhookCodeHasAMutant(t *testing.T) {
	total := 0
	for _, dir := range []string{"internal/admit", "internal/webhook"} {
		files, _ := filepath.Glob(filepath.Join(repoRoot, dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			sites, err := goSites(f, src)
			if err != nil {
				t.Fatal(err)
			}
			total += len(sites)
			for _, u := range refusals(t, f, src) {
				inSite := func(s goSite) bool {
					if s.Start <= u.off && u.off < s.End {
						return true
					}
					// e := field.Duplicate(...); e.Detail = ...; return field.ErrorList{e}
					return u.variable != "" && (s.Func == u.fn || strings.HasSuffix(s.Func, "."+u.fn)) &&
						regexp.MustCompile(`\b`+u.variable+`\b`).Match(src[s.Start:s.End])
				}
				if !slices.ContainsFunc(sites, inSite) {
					t.Errorf("%s:%d: %s builds a refusal no mutant removes: return it from the validator or append it to its field.ErrorList (hack/mutants goSites)", f, u.line, u.what)
				}
			}
		}
	}
	if total < 17 {
		t.Errorf("%d refusals in the webhook's code, want at least the 17 of issue 13: a check was lost", total)
	}
}

type refusal struct {
	off, line int
	what      string
	// fn is the function building it; variable the one it is assigned to.
	fn, variable string
}

// refusals are the calls that build a refusal: field error constructors and
// helpers returning *field.Error (outside those helpers), denial and
// configDenial (outside their own bodies).
func refusals(t *testing.T, filename string, src []byte) []refusal {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filename, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	helpers := map[string]bool{"denial": true, "configDenial": true}
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Type.Results != nil && len(fn.Type.Results.List) == 1 {
			if s, ok := fn.Type.Results.List[0].Type.(*ast.StarExpr); ok {
				if sel, ok := s.X.(*ast.SelectorExpr); ok && sel.Sel.Name == "Error" {
					if x, ok := sel.X.(*ast.Ident); ok && x.Name == "field" {
						helpers[fn.Name.Name] = true
					}
				}
			}
		}
	}
	var out []refusal
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Body == nil || helpers[fn.Name.Name] {
			continue
		}
		assigned := map[ast.Node]string{}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			if a, ok := n.(*ast.AssignStmt); ok && len(a.Lhs) == 1 && len(a.Rhs) == 1 {
				if id, ok := a.Lhs[0].(*ast.Ident); ok {
					assigned[a.Rhs[0]] = id.Name
				}
			}
			c, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			what := ""
			switch fun := c.Fun.(type) {
			case *ast.Ident:
				if helpers[fun.Name] {
					what = fun.Name
				}
			case *ast.SelectorExpr:
				if x, ok := fun.X.(*ast.Ident); ok && x.Name == "field" && fieldErrorConstructors.MatchString(fun.Sel.Name) {
					what = "field." + fun.Sel.Name
				}
			}
			if what != "" {
				p := fset.Position(c.Pos())
				out = append(out, refusal{off: p.Offset, line: p.Line, what: what, fn: fn.Name.Name, variable: assigned[c]})
				return false
			}
			return true
		})
	}
	return out
}

// TestANewPolicyIsMutated adds a policy to a copy of the bundle, in shapes
// the shipped ones do not have (no failurePolicy, a binding with
// matchResources and a paramRef): its mutants appear without any change to
// the generator, and a policy with no validation is refused.
func TestANewPolicyIsMutated(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"policies", "config/webhook/base", "internal/admit", "internal/webhook"} {
		copyDir(t, filepath.Join(repoRoot, d), filepath.Join(root, d))
	}
	before, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "policies", "a-new-rule")
	writeFile(t, filepath.Join(dir, "policy.yaml"), `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: a-new-rule
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      resources: [configmaps]
      operations: [CREATE, UPDATE]
    - apiGroups: [""]
      apiVersions: [v1]
      resources: [secrets]
      operations:
      - DELETE
  matchConditions:
  - name: only-some
    expression: "request.userInfo.username != 'x'"
  variables:
  - name: named
    expression: "has(object.metadata.name)"
  - name: labels
    expression: "object.metadata.?labels.orValue({})"
  validations:
  # the first rule
  - expression: >-
      object.metadata.name != 'a'
    message: no a
  - expression: "object.metadata.name != 'b'"
    message: no b
`)
	writeFile(t, filepath.Join(dir, "binding.yaml"), `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
spec:
  policyName: a-new-rule
  paramRef:
    name: p
    parameterNotFoundAction: Deny
  matchResources:
    namespaceSelector:
      matchLabels: {a: b}
  validationActions: [Deny]
`)
	after, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	var added []string
	for _, m := range after {
		if !slices.ContainsFunc(before, func(b Mutant) bool { return b.ID == m.ID }) {
			added = append(added, m.ID)
		}
	}
	want := []string{
		"a-new-rule/validations[0]", "a-new-rule/validations[1]",
		"a-new-rule/matchConditions[0] only-some=false", "a-new-rule/matchConditions[0] only-some=true",
		"a-new-rule/failurePolicy=Ignore",
		"a-new-rule/matchConstraints.resourceRules[0] dropped",
		"a-new-rule/matchConstraints.resourceRules[0] without CREATE", "a-new-rule/matchConstraints.resourceRules[0] without UPDATE",
		"a-new-rule/matchConstraints.resourceRules[1] dropped",
		"a-new-rule/variables.named=true", "a-new-rule/variables.named=false",
		"a-new-rule/binding validationActions=[Audit]", "a-new-rule/binding matchResources dropped",
		"a-new-rule/binding paramRef.parameterNotFoundAction=Allow",
	}
	if !reflect.DeepEqual(added, want) {
		t.Errorf("mutants of the new policy:\n got %q\nwant %q", added, want)
	}
	for _, m := range after {
		if strings.HasPrefix(m.ID, "a-new-rule/") {
			var doc any
			if err := yaml.Unmarshal(m.Mutated, &doc); err != nil {
				t.Errorf("%s: %v", m.ID, err)
			}
		}
	}

	writeFile(t, filepath.Join(dir, "policy.yaml"), "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nspec:\n  validations: []\n")
	if _, err := Generate(root); err == nil || !strings.Contains(err.Error(), "no spec.validations") {
		t.Errorf("a policy without validations: got %v, want an error naming it", err)
	}
}

// TestEquivalentsExist keeps the list of equivalent mutants honest: each
// names a mutant the generator makes, with a reason.
func TestEquivalentsExist(t *testing.T) {
	ms := generated(t)
	for id, why := range equivalents {
		if _, ok := ms[id]; !ok {
			t.Errorf("equivalents names %q, which the generator no longer makes: remove it", id)
		}
		if len(why) < 40 {
			t.Errorf("equivalents[%q]: say why the mutant changes no verdict", id)
		}
	}
}

// TestYAMLReadersAreComplete fails when a package's tests read config/ or
// policies/ but yamlReaders leaves it out: its tests would never judge a
// YAML mutant.
func TestYAMLReadersAreComplete(t *testing.T) {
	reads := regexp.MustCompile(`"(\.\./)+(config|policies)\b`)
	err := filepath.WalkDir(repoRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == ".git" || rel == "bin" || rel == "e2e" || rel == "hack" || strings.HasPrefix(rel, ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(filepath.Dir(rel))
		if (reads.Match(b) || pkg == "policies") && !slices.Contains(yamlReaders, pkg) {
			t.Errorf("%s reads the shipped YAML; add %s to yamlReaders", rel, pkg)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestYAMLEditsChangeOnlyTheirEntry: each edit changes only the bytes of
// its entry, comments and layout elsewhere kept, and an edit it cannot make
// exactly is an error.
func TestYAMLEditsChangeOnlyTheirEntry(t *testing.T) {
	src := `# head
spec:
  validations:
  # first
  - expression: >-
      a &&
      b
    message: m
  - expression: "c"   # trailing
    message: n

  selector:
    matchLabels:
      a: b
  # about actions
  validationActions: [Deny]
  empty: {}
`
	for _, tc := range []struct {
		name string
		edit func([]byte) ([]byte, error)
		want string
	}{{
		name: "a block scalar replaced",
		edit: func(b []byte) ([]byte, error) {
			return replaceYAML(b, []any{"spec", "validations", 0, "expression"}, `"true"`)
		},
		want: strings.Replace(src, ">-\n      a &&\n      b\n", "\"true\"\n", 1),
	}, {
		name: "a quoted scalar replaced, its comment too",
		edit: func(b []byte) ([]byte, error) {
			return replaceYAML(b, []any{"spec", "validations", 1, "expression"}, `"false"`)
		},
		want: strings.Replace(src, `"c"   # trailing`, `"false"`, 1),
	}, {
		name: "a flow sequence replaced",
		edit: func(b []byte) ([]byte, error) { return replaceYAML(b, []any{"spec", "validationActions"}, "[Audit]") },
		want: strings.Replace(src, "[Deny]", "[Audit]", 1),
	}, {
		name: "a flow mapping replaced",
		edit: func(b []byte) ([]byte, error) { return replaceYAML(b, []any{"spec", "empty"}, "{x: y}") },
		want: strings.Replace(src, "{}", "{x: y}", 1),
	}, {
		name: "a key deleted with its block value, the next entry's comment kept",
		edit: func(b []byte) ([]byte, error) { return deleteYAML(b, []any{"spec", "selector"}) },
		want: strings.Replace(src, "  selector:\n    matchLabels:\n      a: b\n", "", 1),
	}, {
		name: "a block sequence item deleted",
		edit: func(b []byte) ([]byte, error) { return deleteYAML(b, []any{"spec", "validations", 0}) },
		want: strings.Replace(src, "  - expression: >-\n      a &&\n      b\n    message: m\n", "", 1),
	}, {
		name: "a key added at the end of a mapping",
		edit: func(b []byte) ([]byte, error) {
			return insertYAML(b, []any{"spec", "selector"}, "matchExpressions", "[]")
		},
		want: strings.Replace(src, "      a: b\n", "      a: b\n    matchExpressions: []\n", 1),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.edit([]byte(src))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
	for name, err := range map[string]error{
		"a block sequence replaced": func() error { _, err := replaceYAML([]byte(src), []any{"spec", "validations"}, `"x"`); return err }(),
		"a value replaced by itself": func() error {
			_, err := replaceYAML([]byte(src), []any{"spec", "validationActions"}, "[Deny]")
			return err
		}(),
		"a sequence item's first key": func() error {
			_, err := deleteYAML([]byte(src), []any{"spec", "validations", 0, "expression"})
			return err
		}(),
		"a key added that is there":      func() error { _, err := insertYAML([]byte(src), []any{"spec"}, "empty", "{}"); return err }(),
		"an item of a flow sequence":     func() error { _, err := deleteYAML([]byte(src), []any{"spec", "validationActions", 0}); return err }(),
		"a key added to a flow mapping":  func() error { _, err := insertYAML([]byte(src), []any{"spec", "empty"}, "a", "b"); return err }(),
		"a path that is not in the file": func() error { _, err := deleteYAML([]byte(src), []any{"spec", "nothing"}); return err }(),
	} {
		if err == nil {
			t.Errorf("%s: want an error", name)
		}
	}
}

func TestCELType(t *testing.T) {
	vars := map[string]string{"b": "bool", "l": "list", "w": "list:bool"}
	for _, tc := range []struct{ expr, want string }{
		{"a && b", "bool"},
		{"!variables.b", "bool"},
		{"request.namespace in variables.l", "bool"},
		{"x.y == 'a' ? 1 : 2", ""},
		{"variables.b ? variables.l : []", "list"},
		{"c ? d : e ? [1] : []", "list"},
		{"variables.b", "bool"},
		{"variables.w[0]", "bool"},
		{"variables.l[0]", ""},
		{"[x, y].map(e, e.size() <= 16)", "list:bool"},
		{"object.spec.?egress.orValue([])", "list"},
		{"object.metadata.?name.orValue('')", ""},
		{"x.filter(u, u in y)", "list"},
		{"has(object.spec)", "bool"},
		{"object.items.all(i, i.ok)", "bool"},
		{"variables.l.size()", ""},
		{"{'a': x ? 1 : 2}", ""},
		{"'a ? b : c' + x", ""},
		{"(variables.b)", "bool"},
		{"dyn(x) == null ? {} : x", ""},
		{"variables.l + [1]", "list"},
		{"true", "bool"},
	} {
		if got := celType(tc.expr, vars); got != tc.want {
			t.Errorf("celType(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

// TestNeutralEditKeepsTheMeaning: the neutral edit changes a YAML file's
// bytes and not its content, and a Go file's bytes and not its package
// documentation.
func TestNeutralEditKeepsTheMeaning(t *testing.T) {
	for _, file := range []string{webhookConfig, "internal/webhook/handlers.go"} {
		src, err := os.ReadFile(filepath.Join(repoRoot, file))
		if err != nil {
			t.Fatal(err)
		}
		got := neutralEdit(file, src)
		if string(got) == string(src) {
			t.Errorf("%s: the neutral edit changes nothing", file)
		}
		if strings.HasSuffix(file, ".go") {
			a, err1 := parser.ParseFile(token.NewFileSet(), file, src, parser.ParseComments)
			b, err2 := parser.ParseFile(token.NewFileSet(), file, got, parser.ParseComments)
			if err1 != nil || err2 != nil || a.Doc.Text() != b.Doc.Text() {
				t.Errorf("%s: the neutral edit changes the package documentation (%v, %v)", file, err1, err2)
			}
			continue
		}
		if !reflect.DeepEqual(decode(t, src), decode(t, got)) {
			t.Errorf("%s: the neutral edit changes the content", file)
		}
	}
}

func TestGoSitesRefuseAnAppendOfTwoErrors(t *testing.T) {
	src := `package p
func v() field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, field.Invalid(nil, 1, "a"), field.Required(nil, "b"))
	return errs
}
`
	if _, err := goSites("p.go", []byte(src)); err == nil || !strings.Contains(err.Error(), "more than one field error") {
		t.Errorf("got %v, want an error asking for one append each", err)
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A mutant's tests compile in the module that holds their package: the
// nearest go.mod, so a new harness module needs no list kept here.
func TestModuleOfIsTheNearestGoMod(t *testing.T) {
	w := &workspace{src: t.TempDir()}
	for _, d := range []string{".", "e2e", "e2e/soak", "policies"} {
		if err := os.MkdirAll(filepath.Join(w.src, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []string{"go.mod", "e2e/go.mod"} {
		if err := os.WriteFile(filepath.Join(w.src, m), []byte("module m\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for pkg, want := range map[string][2]string{
		"policies": {".", "./policies"},
		"e2e":      {"e2e", "."},
		"e2e/soak": {"e2e", "./soak"},
	} {
		if dir, rel := w.moduleOf(pkg); dir != want[0] || rel != want[1] {
			t.Errorf("moduleOf(%q) = %q, %q; want %q, %q", pkg, dir, rel, want[0], want[1])
		}
	}
}
