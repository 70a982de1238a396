package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

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

// Generate makes every mutant of the bundle under root: for each
// policies/*/policy.yaml each validation's expression replaced by "true"
// (the rule removed) and each matchCondition by "false" (the policy no
// longer applies) and "true" (it applies to every request its
// matchConstraints match); each binding's validationActions made [Audit]
// (the policy no longer refuses anything); for the webhook configuration
// each matchCondition by "false" and "true"; and for the webhook's code
// (internal/admit, internal/webhook) each refusal removed (goSites).
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
	ms, err := webhookConfigMutants(root, "config/webhook/base/validatingwebhookconfiguration.yaml")
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

func policyMutants(root, dir string) ([]Mutant, error) {
	name := filepath.Base(dir)
	rel := filepath.ToSlash(filepath.Join("policies", name, "policy.yaml"))
	src, doc, err := readDoc(root, rel)
	if err != nil {
		return nil, err
	}
	var out []Mutant
	vals, _ := getPath(doc, "spec", "validations").([]any)
	if len(vals) == 0 {
		return nil, fmt.Errorf("%s has no spec.validations: a policy that refuses nothing is no rule", rel)
	}
	for i := range vals {
		m, err := yamlMutant(src, rel, []any{"spec", "validations", i, "expression"}, `"true"`)
		if err != nil {
			return nil, err
		}
		msg, _ := getPath(doc, "spec", "validations", i, "message").(string)
		m.ID = fmt.Sprintf("%s/validations[%d]", name, i)
		m.Rule = fmt.Sprintf("%s validations[%d] removed: %s", name, i, oneLine(msg))
		out = append(out, m)
	}
	conds, _ := getPath(doc, "spec", "matchConditions").([]any)
	for j := range conds {
		cname, _ := getPath(doc, "spec", "matchConditions", j, "name").(string)
		for _, v := range []string{"false", "true"} {
			m, err := yamlMutant(src, rel, []any{"spec", "matchConditions", j, "expression"}, `"`+v+`"`)
			if err != nil {
				return nil, err
			}
			m.ID = fmt.Sprintf("%s/matchConditions[%d] %s=%s", name, j, cname, v)
			m.Rule = fmt.Sprintf("%s matchConditions[%d] %s: %s", name, j, cname, conditionMeaning(v))
			out = append(out, m)
		}
	}
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
	m, err := yamlMutant(bsrc, brel, []any{"spec", "validationActions"}, "[Audit]")
	if err != nil {
		return nil, err
	}
	m.ID = name + "/binding validationActions=[Audit]"
	m.Rule = name + " binding: validationActions [Audit], nothing refused"
	out = append(out, m)
	return out, nil
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
	var out []Mutant
	for i := range hooks {
		wname, _ := getPath(doc, "webhooks", i, "name").(string)
		conds, _ := getPath(doc, "webhooks", i, "matchConditions").([]any)
		for j := range conds {
			cname, _ := getPath(doc, "webhooks", i, "matchConditions", j, "name").(string)
			for _, v := range []string{"false", "true"} {
				m, err := yamlMutant(src, rel, []any{"webhooks", i, "matchConditions", j, "expression"}, `"`+v+`"`)
				if err != nil {
					return nil, err
				}
				m.ID = fmt.Sprintf("webhook %s/matchConditions[%d] %s=%s", wname, j, cname, v)
				what := "the webhook is never called"
				if v == "true" {
					what = "no longer excludes anyone"
				}
				m.Rule = fmt.Sprintf("webhook %s matchConditions[%d] %s: %s", wname, j, cname, what)
				out = append(out, m)
			}
		}
	}
	return out, nil
}

func yamlMutant(src []byte, rel string, path []any, repl string) (Mutant, error) {
	b, err := replaceYAML(src, path, repl)
	if err != nil {
		return Mutant{}, fmt.Errorf("%s: %w", rel, err)
	}
	return Mutant{File: rel, Mutated: b}, nil
}

// goMutants are the refusals of the non-test Go files of dir.
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
	}
	return out, nil
}
