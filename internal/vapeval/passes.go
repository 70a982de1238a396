package vapeval

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
)

// PassCost is the CEL cost the API server charges one policy for one
// request, pass by pass, as the validating admission policy plugin runs
// them (validator.Validate): the match conditions; when they all hold, the
// validations, then every messageExpression (evaluated whether or not its
// validation failed), then the audit annotations. Each pass is one
// ForInput with a composition context of its own, so a variable read in
// two passes is evaluated, and charged, once in each.
type PassCost struct {
	Matched                                                  bool
	MatchConditions, Validations, Messages, AuditAnnotations int64
}

// Total is the sum of the passes.
func (c PassCost) Total() int64 {
	return c.MatchConditions + c.Validations + c.Messages + c.AuditAnnotations
}

// Passes is a policy compiled the way compilePolicy in the plugin compiles
// it: one composited compiler holding the variables, one condition
// evaluator per pass.
type Passes struct {
	match, validations, messages, audit plugincel.ConditionEvaluator
}

// CompilePasses compiles p into the plugin's four passes.
func CompilePasses(p *admissionregistrationv1.ValidatingAdmissionPolicy) (*Passes, error) {
	c, err := newCompiler(p)
	if err != nil {
		return nil, err
	}
	var evals []plugincel.ConditionEvaluator
	for i, srcs := range passSources(p) {
		evals = append(evals, c.compile(passNames[i], exprsOf(srcs)))
	}
	return &Passes{match: evals[0], validations: evals[1], messages: evals[2], audit: evals[3]}, nil
}

// Cost evaluates the passes on a prepared input as the plugin does and
// returns what each was charged. An expression that errors is charged what
// it cost up to the error, as in the plugin; a pass that cannot run at all
// is an error.
func (p *Passes) Cost(ctx context.Context, in *Input) (PassCost, error) {
	var out PassCost
	run := func(name string, e plugincel.ConditionEvaluator, authz bool) (int64, []plugincel.EvaluationResult, error) {
		budget := int64(celconfig.RuntimeCELCostBudget)
		vars := plugincel.OptionalVariableBindings{VersionedParams: in.params}
		if authz {
			vars.Authorizer = allowAll{}
		}
		results, remaining, err := e.ForInput(ctx, in.versioned, in.request, vars, in.namespace, budget)
		if err != nil {
			return 0, nil, fmt.Errorf("%s: %w", name, err)
		}
		return budget - remaining, results, nil
	}
	cost, results, err := run("matchConditions", p.match, true)
	if err != nil {
		return out, err
	}
	out.MatchConditions = cost
	out.Matched = true
	for _, r := range results {
		if r.Error != nil {
			return out, fmt.Errorf("matchConditions: %w", r.Error)
		}
		if r.EvalResult != nil && r.EvalResult.Value() != true {
			out.Matched = false
		}
	}
	if !out.Matched {
		return out, nil
	}
	if out.Validations, _, err = run("validations", p.validations, true); err != nil {
		return out, err
	}
	if out.Messages, _, err = run("messageExpressions", p.messages, false); err != nil {
		return out, err
	}
	if out.AuditAnnotations, _, err = run("auditAnnotations", p.audit, false); err != nil {
		return out, err
	}
	return out, nil
}
