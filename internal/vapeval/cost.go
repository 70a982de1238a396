package vapeval

import (
	"context"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"
)

// Expression is one CEL expression of a policy, compiled the way the
// validating admission policy plugin compiles it (same environment, the
// policy's variables stored in a composited compiler), so that evaluating it
// charges exactly the runtime cost the API server charges.
type Expression struct {
	// Field is the expression's path in the policy, e.g. spec.validations[3].expression.
	Field string
	// Kind is variable, matchCondition, validation or messageExpression.
	Kind string
	// Validation is the index of the validation a messageExpression belongs to.
	Validation int
	eval       plugincel.ConditionEvaluator
	// own measures the expression's own cost (see OwnCost): variable is its
	// index in spec.variables (-1 if not a variable) and afterAll evaluates
	// every variable, then the expression.
	variable int
	afterAll plugincel.ConditionEvaluator
	set      *ownCosts
}

// ownCosts holds what OwnCost evaluates for all the expressions of one
// policy: prefix[i] reads variables 0..i-1, so that prefix[i+1] costs
// prefix[i] plus variable i's own program and one read; twice reads the
// first variable twice, which costs one read more than prefix[1].
type ownCosts struct {
	prefix []plugincel.ConditionEvaluator
	twice  plugincel.ConditionEvaluator
}

// CompileExpressions compiles every expression of p. A variable is compiled
// as the expression "variables.<name>", which evaluates it (and the
// variables it reads) exactly once.
//
// Each expression is also compiled behind reads of every variable it may
// read, for OwnCost.
func CompileExpressions(p *admissionregistrationv1.ValidatingAdmissionPolicy) ([]*Expression, error) {
	c, err := newCompiler(p)
	if err != nil {
		return nil, err
	}
	reads, set := compileReads(c, p)
	var out []*Expression
	for _, src := range sources(p) {
		e := &Expression{Field: src.Field, Kind: src.Kind, Validation: src.Validation, variable: -1, set: set}
		expr := plainExpression(src.Expression)
		if src.Kind == "variable" {
			e.variable = len(out)
			expr = plainExpression("variables." + src.Name)
		} else {
			e.afterAll = c.compile(src.pass(), append(reads[:len(reads):len(reads)], expr))
		}
		e.eval = c.compile(src.pass(), []plugincel.ExpressionAccessor{expr})
		out = append(out, e)
	}
	return out, nil
}

// Evaluation is the outcome of one expression on one request.
type Evaluation struct {
	Value any
	Cost  int64
	Err   error
}

// Input is one request prepared for evaluation, converted once. It is not
// safe for concurrent use: OwnCost memoizes costs in it.
type Input struct {
	versioned *admission.VersionedAttributes
	request   *admissionv1.AdmissionRequest
	params    runtime.Object
	namespace *corev1.Namespace
	costs     map[plugincel.ConditionEvaluator]int64
}

// NewInput prepares a request, its params (nil when absent) and namespace.
func NewInput(r Request, params runtime.Object, ns *corev1.Namespace) (*Input, error) {
	attrs := admission.NewAttributesRecord(r.Object, r.OldObject, r.Kind, r.Namespace, r.Name, r.Resource,
		r.SubResource, r.Operation, r.Options, r.DryRun, r.User)
	versioned, err := admission.NewVersionedAttributes(attrs, r.Kind, objectInterfaces{})
	if err != nil {
		return nil, err
	}
	in := &Input{versioned: versioned, params: params, request: plugincel.CreateAdmissionRequest(attrs,
		metav1.GroupVersionResource{Group: r.Resource.Group, Version: r.Resource.Version, Resource: r.Resource.Resource},
		metav1.GroupVersionKind{Group: r.Kind.Group, Version: r.Kind.Version, Kind: r.Kind.Kind})}
	if ns != nil {
		in.namespace = plugincel.CreateNamespaceObject(ns)
	}
	return in, nil
}

// Evaluate runs e on a request with the full runtime budget and reports the
// cost the API server would charge for it. To evaluate many expressions on
// one request, prepare it once with NewInput and use EvaluateInput.
func (e *Expression) Evaluate(ctx context.Context, r Request, params runtime.Object, ns *corev1.Namespace) Evaluation {
	in, err := NewInput(r, params, ns)
	if err != nil {
		return Evaluation{Err: err}
	}
	return e.EvaluateInput(ctx, in)
}

// EvaluateInput runs e on a prepared input with the full runtime budget.
// Its Cost is transitive: e's own program and every variable program it
// triggers (each once), what the plugin subtracts from the runtime budget.
func (e *Expression) EvaluateInput(ctx context.Context, in *Input) Evaluation {
	results, cost, err := run(ctx, e.eval, in)
	ev := Evaluation{Cost: cost, Err: err}
	if err == nil && len(results) == 1 {
		ev.Err = results[0].Error
		if results[0].EvalResult != nil {
			ev.Value = results[0].EvalResult.Value()
		}
	}
	return ev
}

func run(ctx context.Context, e plugincel.ConditionEvaluator, in *Input) ([]plugincel.EvaluationResult, int64, error) {
	budget := int64(celconfig.RuntimeCELCostBudget)
	results, remaining, err := e.ForInput(ctx, in.versioned, in.request,
		plugincel.OptionalVariableBindings{VersionedParams: in.params, Authorizer: allowAll{}}, in.namespace, budget)
	return results, budget - remaining, err
}

// cost is what evaluating e on in charges the runtime budget, memoized.
func (in *Input) cost(ctx context.Context, e plugincel.ConditionEvaluator) (int64, error) {
	if c, ok := in.costs[e]; ok {
		return c, nil
	}
	_, c, err := run(ctx, e, in)
	if err != nil {
		return 0, err
	}
	if in.costs == nil {
		in.costs = map[plugincel.ConditionEvaluator]int64{}
	}
	in.costs[e] = c
	return c, nil
}

// OwnCost is the cost of e's own program on a prepared input, what the API
// server holds to the per-call limit: it evaluates each variable as a
// program of its own with its own per-call limit (variableAccessor.Callback
// in the plugin's composition.go), so a program's cost leaves out the
// variables it reads. It is measured with the plugin's own accounting, in
// one context each (which evaluates a variable once and charges each
// program's cost): every variable e may read is evaluated first, then e,
// whose reads then cost only the read; e's own cost is the difference. For
// a variable, the variables it may read are those declared before it, and
// the read "variables.<name>" is left out. An expression that errors counts
// what it cost up to the error, as in the plugin.
func (e *Expression) OwnCost(ctx context.Context, in *Input) (int64, error) {
	s := e.set
	if e.variable < 0 {
		all, err := in.cost(ctx, e.afterAll)
		if err != nil {
			return 0, err
		}
		reads, err := in.cost(ctx, s.prefix[len(s.prefix)-1])
		return all - reads, err
	}
	before, err := in.cost(ctx, s.prefix[e.variable])
	if err != nil {
		return 0, err
	}
	after, err := in.cost(ctx, s.prefix[e.variable+1])
	if err != nil {
		return 0, err
	}
	read, err := s.read(ctx, in)
	return after - before - read, err
}

// read is the cost of reading a variable already evaluated.
func (s *ownCosts) read(ctx context.Context, in *Input) (int64, error) {
	if s.twice == nil {
		return 0, nil
	}
	once, err := in.cost(ctx, s.prefix[1])
	if err != nil {
		return 0, err
	}
	twice, err := in.cost(ctx, s.twice)
	return twice - once, err
}

// compileReads compiles, for OwnCost, a read of each of p's variables and
// the prefixes of those reads.
func compileReads(c *compiler, p *admissionregistrationv1.ValidatingAdmissionPolicy) (reads []plugincel.ExpressionAccessor, set *ownCosts) {
	// reads[i] reads variable i: an expression of its own, as the plugin
	// evaluates a list of conditions one after the other in one context.
	for _, v := range p.Spec.Variables {
		reads = append(reads, plainExpression("variables."+v.Name))
	}
	set = &ownCosts{}
	for i := range len(reads) + 1 {
		set.prefix = append(set.prefix, c.compile("", reads[:i:i]))
	}
	if len(reads) > 0 {
		set.twice = c.compile("", []plugincel.ExpressionAccessor{reads[0], reads[0]})
	}
	return reads, set
}

// Pass is one of the plugin's evaluation passes over a matched policy
// (see PassCost): its expressions in one context, as validator.Validate
// evaluates them.
type Pass struct {
	// Name is matchConditions, validations, messageExpressions or auditAnnotations.
	Name string
	// Fields are its expressions, named as CompileExpressions names them.
	Fields []string
	eval   plugincel.ConditionEvaluator
	// then[j] is the pass followed by a read of variable j.
	then []plugincel.ConditionEvaluator
	set  *ownCosts
}

// CompilePassReads compiles p's four passes, each also followed by a read
// of each variable, to tell which variables a pass evaluates.
func CompilePassReads(p *admissionregistrationv1.ValidatingAdmissionPolicy) ([]*Pass, error) {
	c, err := newCompiler(p)
	if err != nil {
		return nil, err
	}
	reads, set := compileReads(c, p)
	var passes []*Pass
	for i, srcs := range passSources(p) {
		pass := &Pass{Name: passNames[i], set: set}
		exprs := exprsOf(srcs)
		for _, src := range srcs {
			pass.Fields = append(pass.Fields, src.Field)
		}
		pass.eval = c.compile(pass.Name, exprs)
		for _, r := range reads {
			pass.then = append(pass.then, c.compile(pass.Name, append(exprs[:len(exprs):len(exprs)], r)))
		}
		passes = append(passes, pass)
	}
	return passes, nil
}

// Run evaluates the pass on a prepared input and returns what it charges
// the runtime budget and which variables it evaluated: those a read after
// the pass finds already evaluated, costing only the read.
func (p *Pass) Run(ctx context.Context, in *Input) (cost int64, evaluated []bool, err error) {
	if cost, err = in.cost(ctx, p.eval); err != nil {
		return 0, nil, err
	}
	read, err := p.set.read(ctx, in)
	if err != nil {
		return 0, nil, err
	}
	for _, then := range p.then {
		c, err := in.cost(ctx, then)
		if err != nil {
			return 0, nil, err
		}
		evaluated = append(evaluated, c-cost == read)
	}
	return cost, evaluated, nil
}

// PerCallLimit is the API server's limit on the cost of one expression.
const PerCallLimit = celconfig.PerCallLimit

type namedVariable struct {
	v admissionregistrationv1.Variable
}

func (n namedVariable) GetExpression() string   { return n.v.Expression }
func (n namedVariable) GetName() string         { return n.v.Name }
func (n namedVariable) ReturnTypes() []*celType { return []*celType{celAnyType} }

type plainExpression string

func (p plainExpression) GetExpression() string   { return string(p) }
func (p plainExpression) ReturnTypes() []*celType { return []*celType{celAnyType} }

// CompileForCreate compiles every expression of p the way the API server
// validates a new policy: in the NewExpressions environment of the given
// compatibility version (one minor below the server's own). It returns one
// line per expression that would be refused.
func CompileForCreate(p *admissionregistrationv1.ValidatingAdmissionPolicy, compatibility *version.Version) ([]string, error) {
	hasParams := p.Spec.ParamKind != nil
	decls := plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true}
	c, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(compatibility))
	if err != nil {
		return nil, err
	}
	var out []string
	for i, v := range p.Spec.Variables {
		if res := c.CompileAndStoreVariable(namedVariable{v}, decls, environment.NewExpressions); res.Error != nil {
			out = append(out, fmt.Sprintf("spec.variables[%d] (%s): %v", i, v.Name, res.Error))
		}
	}
	check := func(field, expr string, d plugincel.OptionalVariableDeclarations) {
		if res := c.CompileCELExpression(plainExpression(expr), d, environment.NewExpressions); res.Error != nil {
			out = append(out, fmt.Sprintf("%s: %v", field, res.Error))
		}
	}
	for i, m := range p.Spec.MatchConditions {
		check(fmt.Sprintf("spec.matchConditions[%d]", i), m.Expression, decls)
	}
	for i, v := range p.Spec.Validations {
		check(fmt.Sprintf("spec.validations[%d].expression", i), v.Expression, decls)
		if v.MessageExpression != "" {
			check(fmt.Sprintf("spec.validations[%d].messageExpression", i), v.MessageExpression,
				plugincel.OptionalVariableDeclarations{HasParams: hasParams})
		}
	}
	for i, a := range p.Spec.AuditAnnotations {
		check(fmt.Sprintf("spec.auditAnnotations[%d].valueExpression", i), a.ValueExpression, decls)
	}
	return out, nil
}
