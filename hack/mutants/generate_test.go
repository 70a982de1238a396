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

// wantOneChange fails unless m's file differs from the committed one only
// at path, where it holds want.
func wantOneChange(t *testing.T, m Mutant, path []any, want any) {
	t.Helper()
	orig, err := os.ReadFile(filepath.Join(repoRoot, m.File))
	if err != nil {
		t.Fatal(err)
	}
	o, got := decode(t, orig), decode(t, m.Mutated)
	if v := getPath(got, path...); !reflect.DeepEqual(v, want) {
		t.Errorf("%s: %v is %v, want %v", m.ID, path, v, want)
	}
	if err := setPath(o, path, want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(o, got) {
		t.Errorf("%s: the mutant changes more than %v", m.ID, path)
	}
}

// TestEveryShippedRuleHasAMutant reads the shipped files on its own and
// requires a mutant for each validation and matchCondition of each policy,
// each binding and each matchCondition of the webhook configuration, each
// changing exactly that value: a rule added to the bundle is mutated, and
// the list cannot shrink without this test failing.
func TestEveryShippedRuleHasAMutant(t *testing.T) {
	ms := generated(t)
	want := map[string]bool{}
	expect := func(id string, file string, path []any, v any) {
		t.Helper()
		want[id] = true
		m, ok := ms[id]
		if !ok {
			t.Errorf("no mutant %s", id)
			return
		}
		if m.File != file {
			t.Errorf("%s changes %s, want %s", id, m.File, file)
		}
		wantOneChange(t, m, path, v)
	}
	policies, err := filepath.Glob(filepath.Join(repoRoot, "policies", "*", "policy.yaml"))
	if err != nil || len(policies) < 5 {
		t.Fatalf("want the five shipped policies, found %v (%v)", policies, err)
	}
	for _, p := range policies {
		name := filepath.Base(filepath.Dir(p))
		rel := "policies/" + name + "/policy.yaml"
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		doc := decode(t, b)
		vals, _ := getPath(doc, "spec", "validations").([]any)
		if len(vals) == 0 {
			t.Errorf("%s: no validations", rel)
		}
		for i := range vals {
			expect(fmt.Sprintf("%s/validations[%d]", name, i), rel, []any{"spec", "validations", i, "expression"}, "true")
		}
		conds, _ := getPath(doc, "spec", "matchConditions").([]any)
		for j := range conds {
			cname := getPath(doc, "spec", "matchConditions", j, "name")
			for _, v := range []string{"false", "true"} {
				expect(fmt.Sprintf("%s/matchConditions[%d] %s=%s", name, j, cname, v), rel, []any{"spec", "matchConditions", j, "expression"}, v)
			}
		}
		brel := "policies/" + name + "/binding.yaml"
		if _, err := os.Stat(filepath.Join(repoRoot, brel)); err != nil {
			brel = "policies/" + name + "/binding/binding.yaml"
		}
		expect(name+"/binding validationActions=[Audit]", brel, []any{"spec", "validationActions"}, []any{"Audit"})
	}
	const vwc = "config/webhook/base/validatingwebhookconfiguration.yaml"
	b, err := os.ReadFile(filepath.Join(repoRoot, vwc))
	if err != nil {
		t.Fatal(err)
	}
	doc := decode(t, b)
	hooks, _ := doc["webhooks"].([]any)
	if len(hooks) != 2 {
		t.Fatalf("%s: want the two webhook entries, got %d", vwc, len(hooks))
	}
	for i := range hooks {
		conds, _ := getPath(doc, "webhooks", i, "matchConditions").([]any)
		if len(conds) == 0 {
			t.Errorf("%s: webhooks[%d] has no matchConditions", vwc, i)
		}
		for j := range conds {
			for _, v := range []string{"false", "true"} {
				expect(fmt.Sprintf("webhook %s/matchConditions[%d] %s=%s", getPath(doc, "webhooks", i, "name"), j, getPath(doc, "webhooks", i, "matchConditions", j, "name"), v),
					vwc, []any{"webhooks", i, "matchConditions", j, "expression"}, v)
			}
		}
	}
	var extra []string
	for id, m := range ms {
		if !m.Go && !want[id] {
			extra = append(extra, id)
		}
	}
	if len(extra) > 0 {
		t.Errorf("mutants this test does not know: %v", extra)
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

// TestANewPolicyIsMutated adds a policy to a copy of the bundle: its
// validations, matchCondition and binding get mutants without any change
// to the generator, and a policy with no validation is refused.
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
  matchConditions:
  - name: only-some
    expression: "request.userInfo.username != 'x'"
  validations:
  # the first rule
  - expression: >-
      object.metadata.name != 'a'
    message: no a
  - expression: "object.metadata.name != 'b'"
    message: no b
`)
	writeFile(t, filepath.Join(dir, "binding.yaml"), "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nspec:\n  policyName: a-new-rule\n  validationActions: [Deny]\n")
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
	sort.Strings(added)
	want := []string{"a-new-rule/binding validationActions=[Audit]", "a-new-rule/matchConditions[0] only-some=false", "a-new-rule/matchConditions[0] only-some=true", "a-new-rule/validations[0]", "a-new-rule/validations[1]"}
	if !reflect.DeepEqual(added, want) {
		t.Errorf("mutants of the new policy: got %v, want %v", added, want)
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

func TestReplaceYAMLChangesOnlyThatValue(t *testing.T) {
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

  validationActions: [Deny]
`
	for _, tc := range []struct {
		path []any
		repl string
		want string
	}{{
		path: []any{"spec", "validations", 0, "expression"}, repl: `"true"`,
		want: "# head\nspec:\n  validations:\n  # first\n  - expression: \"true\"\n    message: m\n  - expression: \"c\"   # trailing\n    message: n\n\n  validationActions: [Deny]\n",
	}, {
		path: []any{"spec", "validations", 1, "expression"}, repl: `"false"`,
		want: "# head\nspec:\n  validations:\n  # first\n  - expression: >-\n      a &&\n      b\n    message: m\n  - expression: \"false\"\n    message: n\n\n  validationActions: [Deny]\n",
	}, {
		path: []any{"spec", "validationActions"}, repl: `[Audit]`,
		want: strings.Replace(src, "[Deny]", "[Audit]", 1),
	}} {
		got, err := replaceYAML([]byte(src), tc.path, tc.repl)
		if err != nil {
			t.Fatalf("%v: %v", tc.path, err)
		}
		if string(got) != tc.want {
			t.Errorf("%v:\ngot:\n%s\nwant:\n%s", tc.path, got, tc.want)
		}
	}
	if _, err := replaceYAML([]byte(src), []any{"spec", "validations"}, `"x"`); err == nil {
		t.Error("replacing a block sequence: want an error")
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
