package main

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"
)

// Mutant is one shipped rule, weakened: the file that holds it with that
// one rule removed or made not to apply.
type Mutant struct {
	// ID names the mutant stably (no line numbers): the policy or webhook
	// entry and the index of the rule in it.
	ID string
	// Rule is what the table shows: the ID and the rule's message or code.
	Rule string
	// File is the changed file, relative to the repository root.
	File string
	// Go is true for a mutant of the webhook's code (run through
	// go test -overlay), false for a YAML file of the bundle.
	Go      bool
	Mutated []byte
	// Equivalent, when set, is why this mutant changes no verdict by
	// design: it is listed, never run.
	Equivalent string
}

// equivalents are the mutants that change no verdict by design, with the
// reason. A test (TestEquivalentsExist) keeps every entry naming a mutant
// the generator still makes.
var equivalents = map[string]string{
	"holder-epoch/matchConditions[0] changes-backend-annotations=true": "the condition only spares the evaluation of writes that leave the three backend annotations as they were, which the validations admit anyway (rule 7, the variable unchanged)",
}

const (
	// optInLabel is the namespace label that opts a namespace into the
	// fence (api/v1alpha1.FencedNamespaceLabel).
	optInLabel = "fence.sandbox.namzu.ai/enabled"
	// perSandboxLabel is the default label of a per-sandbox egress policy
	// (pkg/fence.DefaultPerSandboxLabelKey).
	perSandboxLabel = "sandbox.namzu.ai/per-sandbox-egress"
	// webhookConfig is the webhook configuration the mutants weaken.
	webhookConfig = "config/webhook/base/validatingwebhookconfiguration.yaml"
)

// Generate makes every mutant of the bundle under root, in a fixed order:
//
//   - for each policies/*/policy.yaml (policyMutants): each validation
//     removed, each matchCondition made false and true, failurePolicy
//     flipped, matchConstraints widened or narrowed (namespaceSelector
//     dropped, each resourceRule and each of its operations dropped), and
//     each bool or list variable made a constant;
//   - for each binding: validationActions [Audit], matchResources dropped,
//     a paramRef's parameterNotFoundAction Deny made Allow;
//   - for each entry of the webhook configuration (webhookConfigMutants):
//     each rule and operation dropped, failurePolicy flipped,
//     timeoutSeconds 30, a namespaceSelector on the opt-in label, an
//     objectSelector on the per-sandbox label, each matchCondition false
//     and true;
//   - for the webhook's code (internal/admit, internal/webhook): each
//     refusal removed (goSites) and each early admission.Allowed branch
//     always and never taken (branchSites).
//
// A mutant that would change nothing (a condition already "false") is not
// made.
func Generate(root string) ([]Mutant, error) {
	var out []Mutant
	policies, err := filepath.Glob(filepath.Join(root, "policies", "*", "policy.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(policies)
	if len(policies) == 0 {
		return nil, fmt.Errorf("no policies/*/policy.yaml under %s", root)
	}
	for _, p := range policies {
		ms, err := policyMutants(root, filepath.Dir(p))
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
	}
	ms, err := webhookConfigMutants(root, webhookConfig)
	if err != nil {
		return nil, err
	}
	out = append(out, ms...)
	for _, dir := range []string{"internal/admit", "internal/webhook"} {
		ms, err := goMutants(root, dir)
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
	}
	seen := map[string]bool{}
	for i, m := range out {
		if seen[m.ID] {
			return nil, fmt.Errorf("two mutants named %s", m.ID)
		}
		seen[m.ID] = true
		out[i].Equivalent = equivalents[m.ID]
	}
	return out, nil
}

func readDoc(root, rel string) ([]byte, map[string]any, error) {
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return nil, nil, err
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", rel, err)
	}
	return b, doc, nil
}

// yamlFile collects the mutants of one YAML file.
type yamlFile struct {
	rel string
	src []byte
	doc map[string]any
	out []Mutant
}

func (f *yamlFile) add(id, rule string, mutated []byte, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %s: %w", f.rel, id, err)
	}
	f.out = append(f.out, Mutant{ID: id, Rule: rule, File: f.rel, Mutated: mutated})
	return nil
}

// set replaces the value at path by repl, unless it already is repl.
func (f *yamlFile) set(id, rule string, path []any, repl string) error {
	var want any
	if err := yaml.Unmarshal([]byte(repl), &want); err != nil {
		return err
	}
	if reflect.DeepEqual(getPath(f.doc, path...), want) {
		return nil
	}
	b, err := replaceYAML(f.src, path, repl)
	return f.add(id, rule, b, err)
}

// setOrInsert sets key of the mapping at path to value, adding the key
// when it is absent.
func (f *yamlFile) setOrInsert(id, rule string, path []any, key, value string) error {
	m, _ := getPath(f.doc, path...).(map[string]any)
	if _, ok := m[key]; ok {
		return f.set(id, rule, append(append([]any{}, path...), key), value)
	}
	b, err := insertYAML(f.src, path, key, value)
	return f.add(id, rule, b, err)
}

func (f *yamlFile) drop(id, rule string, path []any) error {
	b, err := deleteYAML(f.src, path)
	return f.add(id, rule, b, err)
}

// dropItem drops item i of the sequence at path: a flow sequence is
// rewritten without it, a block sequence loses the item's lines.
func (f *yamlFile) dropItem(id, rule string, path []any, i int) error {
	fs, _, err := locate(f.src, path)
	if err != nil {
		return f.add(id, rule, nil, err)
	}
	seq := fs[len(fs)-1].node
	if seq.Style&yamlv3.FlowStyle == 0 {
		return f.drop(id, rule, append(append([]any{}, path...), i))
	}
	var items []string
	for k, n := range seq.Content {
		if k == i {
			continue
		}
		if n.Kind != yamlv3.ScalarNode {
			return f.add(id, rule, nil, fmt.Errorf("%v: a flow sequence of non-scalars", path))
		}
		items = append(items, flowScalar(n.Value))
	}
	return f.set(id, rule, path, "["+strings.Join(items, ", ")+"]")
}

var plainScalar = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]*$`)

func flowScalar(s string) string {
	if plainScalar.MatchString(s) {
		return s
	}
	return strconv.Quote(s)
}

// constants are, by type, what a variable of that type is made: a bool
// always and never true, a list always empty. Other types (strings,
// numbers, maps, optionals) mostly feed messages; a constant there is left
// to the validations' own mutants.
var constants = map[string][]string{
	"bool": {"true", "false"},
	"list": {"[]"},
}

func policyMutants(root, dir string) ([]Mutant, error) {
	name := filepath.Base(dir)
	rel := filepath.ToSlash(filepath.Join("policies", name, "policy.yaml"))
	src, doc, err := readDoc(root, rel)
	if err != nil {
		return nil, err
	}
	f := &yamlFile{rel: rel, src: src, doc: doc}
	vals, _ := getPath(doc, "spec", "validations").([]any)
	if len(vals) == 0 {
		return nil, fmt.Errorf("%s has no spec.validations: a policy that refuses nothing is no rule", rel)
	}
	for i := range vals {
		msg, _ := getPath(doc, "spec", "validations", i, "message").(string)
		if err := f.set(fmt.Sprintf("%s/validations[%d]", name, i), fmt.Sprintf("%s validations[%d] removed: %s", name, i, oneLine(msg)),
			[]any{"spec", "validations", i, "expression"}, `"true"`); err != nil {
			return nil, err
		}
	}
	conds, _ := getPath(doc, "spec", "matchConditions").([]any)
	for j := range conds {
		cname, _ := getPath(doc, "spec", "matchConditions", j, "name").(string)
		for _, v := range []string{"false", "true"} {
			if err := f.set(fmt.Sprintf("%s/matchConditions[%d] %s=%s", name, j, cname, v), fmt.Sprintf("%s matchConditions[%d] %s: %s", name, j, cname, conditionMeaning(v)),
				[]any{"spec", "matchConditions", j, "expression"}, `"`+v+`"`); err != nil {
				return nil, err
			}
		}
	}
	fp, _ := getPath(doc, "spec", "failurePolicy").(string)
	flip, what := "Ignore", "an error in the policy admits the request"
	if fp == "Ignore" {
		flip, what = "Fail", "an error in the policy refuses the request (a vanished namespace's leftovers can no longer be deleted)"
	}
	if err := f.setOrInsert(name+"/failurePolicy="+flip, name+" failurePolicy "+flip+": "+what, []any{"spec"}, "failurePolicy", flip); err != nil {
		return nil, err
	}
	if err := matchMutants(f, name, name, []any{"spec", "matchConstraints"}, "resourceRules"); err != nil {
		return nil, err
	}
	known := map[string]string{}
	vars, _ := getPath(doc, "spec", "variables").([]any)
	for k := range vars {
		vname, _ := getPath(doc, "spec", "variables", k, "name").(string)
		expr, _ := getPath(doc, "spec", "variables", k, "expression").(string)
		t := celType(expr, known)
		known[vname] = t
		base, _, _ := strings.Cut(t, ":")
		for _, c := range constants[base] {
			if err := f.set(fmt.Sprintf("%s/variables.%s=%s", name, vname, c), fmt.Sprintf("%s variables.%s made %s (was: %s)", name, vname, c, oneLine(expr)),
				[]any{"spec", "variables", k, "expression"}, strconv.Quote(c)); err != nil {
				return nil, err
			}
		}
	}
	out := f.out

	brel := filepath.ToSlash(filepath.Join("policies", name, "binding.yaml"))
	if _, err := os.Stat(filepath.Join(root, brel)); err != nil {
		brel = filepath.ToSlash(filepath.Join("policies", name, "binding", "binding.yaml"))
	}
	bsrc, bdoc, err := readDoc(root, brel)
	if err != nil {
		return nil, err
	}
	if acts, _ := getPath(bdoc, "spec", "validationActions").([]any); len(acts) != 1 || acts[0] != "Deny" {
		return nil, fmt.Errorf("%s: validationActions %v: the shipped bindings deny (config/components/enforcement switches modes)", brel, acts)
	}
	b := &yamlFile{rel: brel, src: bsrc, doc: bdoc}
	if err := b.set(name+"/binding validationActions=[Audit]", name+" binding: validationActions [Audit], nothing refused",
		[]any{"spec", "validationActions"}, "[Audit]"); err != nil {
		return nil, err
	}
	if getPath(bdoc, "spec", "matchResources") != nil {
		if err := b.drop(name+"/binding matchResources dropped", name+" binding: matchResources dropped, the policy's own matchConstraints alone",
			[]any{"spec", "matchResources"}); err != nil {
			return nil, err
		}
	}
	if getPath(bdoc, "spec", "paramRef", "parameterNotFoundAction") == "Deny" {
		if err := b.set(name+"/binding paramRef.parameterNotFoundAction=Allow", name+" binding: a missing parameter admits",
			[]any{"spec", "paramRef", "parameterNotFoundAction"}, "Allow"); err != nil {
			return nil, err
		}
	}
	return append(out, b.out...), nil
}

// matchMutants are the mutants of a policy's matchConstraints or a webhook
// entry (at path): its namespaceSelector dropped, and each of its rules
// (under rulesKey) and each operation of a rule dropped, when another is
// left.
func matchMutants(f *yamlFile, id, show string, path []any, rulesKey string) error {
	at := func(p ...any) []any { return append(append([]any{}, path...), p...) }
	prefix := id + "/"
	if rulesKey == "resourceRules" {
		prefix = id + "/matchConstraints."
	}
	if sel, ok := getPath(f.doc, at("namespaceSelector")...).(map[string]any); ok && len(sel) > 0 {
		if err := f.drop(prefix+"namespaceSelector dropped", show+" namespaceSelector dropped: every namespace, a vanished one's included",
			at("namespaceSelector")); err != nil {
			return err
		}
	}
	rules, _ := getPath(f.doc, at(rulesKey)...).([]any)
	for r := range rules {
		if len(rules) > 1 {
			if err := f.dropItem(fmt.Sprintf("%s%s[%d] dropped", prefix, rulesKey, r), fmt.Sprintf("%s %s[%d] dropped: %s", show, rulesKey, r, ruleShown(rules[r])),
				at(rulesKey), r); err != nil {
				return err
			}
		}
		ops, _ := getPath(f.doc, at(rulesKey, r, "operations")...).([]any)
		for o := range ops {
			if len(ops) > 1 {
				if err := f.dropItem(fmt.Sprintf("%s%s[%d] without %v", prefix, rulesKey, r, ops[o]), fmt.Sprintf("%s %s[%d] without %v: %s", show, rulesKey, r, ops[o], ruleShown(rules[r])),
					at(rulesKey, r, "operations"), o); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func ruleShown(rule any) string {
	res, _ := getPath(rule, "resources").([]any)
	ops, _ := getPath(rule, "operations").([]any)
	return fmt.Sprintf("%v %v", res, ops)
}

func conditionMeaning(v string) string {
	if v == "false" {
		return "never applies"
	}
	return "applies to every request it matches"
}

func webhookConfigMutants(root, rel string) ([]Mutant, error) {
	src, doc, err := readDoc(root, rel)
	if err != nil {
		return nil, err
	}
	hooks, _ := getPath(doc, "webhooks").([]any)
	if len(hooks) == 0 {
		return nil, fmt.Errorf("%s: no webhooks", rel)
	}
	f := &yamlFile{rel: rel, src: src, doc: doc}
	for i := range hooks {
		wname, _ := getPath(doc, "webhooks", i, "name").(string)
		id, show := "webhook "+wname, "webhook "+wname
		entry := []any{"webhooks", i}
		at := func(p ...any) []any { return append(append([]any{}, entry...), p...) }
		if err := matchMutants(f, id, show, entry, "rules"); err != nil {
			return nil, err
		}
		fp, _ := getPath(doc, at("failurePolicy")...).(string)
		flip, what := "Ignore", "a write the webhook could not check is admitted"
		if fp == "Ignore" {
			flip, what = "Fail", "a write the webhook could not check is refused"
		}
		if err := f.setOrInsert(id+"/failurePolicy="+flip, show+" failurePolicy "+flip+": "+what, entry, "failurePolicy", flip); err != nil {
			return nil, err
		}
		if err := f.setOrInsert(id+"/timeoutSeconds=30", show+" timeoutSeconds 30: the API server waits past the webhook's own lookup deadline",
			entry, "timeoutSeconds", "30"); err != nil {
			return nil, err
		}
		optIn := fmt.Sprintf(`{matchLabels: {%s: "true"}}`, optInLabel)
		if err := f.setOrInsert(id+"/namespaceSelector=opt-in", show+" namespaceSelector on "+optInLabel+": only opted-in namespaces are routed",
			entry, "namespaceSelector", optIn); err != nil {
			return nil, err
		}
		labelled := fmt.Sprintf(`{matchExpressions: [{key: %s, operator: Exists}]}`, perSandboxLabel)
		if err := f.setOrInsert(id+"/objectSelector=per-sandbox-label", show+" objectSelector on "+perSandboxLabel+": only labelled policies are routed",
			entry, "objectSelector", labelled); err != nil {
			return nil, err
		}
		conds, _ := getPath(doc, at("matchConditions")...).([]any)
		for j := range conds {
			cname, _ := getPath(doc, at("matchConditions", j, "name")...).(string)
			for _, v := range []string{"false", "true"} {
				what := "the webhook is never called"
				if v == "true" {
					what = "every request of the rules is routed"
				}
				if err := f.set(fmt.Sprintf("%s/matchConditions[%d] %s=%s", id, j, cname, v), fmt.Sprintf("%s matchConditions[%d] %s: %s", show, j, cname, what),
					at("matchConditions", j, "expression"), `"`+v+`"`); err != nil {
					return nil, err
				}
			}
		}
	}
	return f.out, nil
}

// goMutants are the refusals and the early admission.Allowed branches of
// the non-test Go files of dir.
func goMutants(root, dir string) ([]Mutant, error) {
	files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	pkg := filepath.Base(dir)
	var out []Mutant
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		rel := filepath.ToSlash(filepath.Join(dir, filepath.Base(f)))
		sites, err := goSites(rel, src)
		if err != nil {
			return nil, err
		}
		for _, s := range sites {
			b, err := applySite(rel, src, s)
			if err != nil {
				return nil, err
			}
			out = append(out, Mutant{
				ID:      fmt.Sprintf("%s.%s#%d", pkg, s.Func, s.N),
				Rule:    fmt.Sprintf("%s.%s#%d (%s:%d) removed: %s", pkg, s.Func, s.N, filepath.Base(f), s.Line, s.Show),
				File:    rel,
				Go:      true,
				Mutated: b,
			})
		}
		branches, err := branchSites(rel, src)
		if err != nil {
			return nil, err
		}
		for _, s := range branches {
			b, err := applySite(rel, src, s)
			if err != nil {
				return nil, err
			}
			out = append(out, Mutant{
				ID:      fmt.Sprintf("%s.%s allowed#%d=%s", pkg, s.Func, s.N, s.Taken),
				Rule:    fmt.Sprintf("%s.%s allowed#%d (%s:%d) %s taken: %s", pkg, s.Func, s.N, filepath.Base(f), s.Line, s.Taken, s.Show),
				File:    rel,
				Go:      true,
				Mutated: b,
			})
		}
	}
	return out, nil
}
