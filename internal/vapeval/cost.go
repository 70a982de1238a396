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
}

// CompileExpressions compiles every expression of p. A variable is compiled
// as the expression "variables.<name>", which evaluates it (and the
// variables it reads) exactly once.
func CompileExpressions(p *admissionregistrationv1.ValidatingAdmissionPolicy) ([]*Expression, error) {
	hasParams := p.Spec.ParamKind != nil
	decls := plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true}
	msgDecls := plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: false}
	var vars []plugincel.NamedExpressionAccessor
	for i := range p.Spec.Variables {
		vars = append(vars, namedVariable{p.Spec.Variables[i]})
	}
	// One compiler holds the variables for every expression, as in the plugin.
	c, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		return nil, err
	}
	c.CompileAndStoreVariables(vars, decls, environment.StoredExpressions)
	var out []*Expression
	add := func(kind, field, expr string, validation int, d plugincel.OptionalVariableDeclarations) error {
		eval := c.CompileCondition([]plugincel.ExpressionAccessor{plainExpression(expr)}, d, environment.StoredExpressions)
		out = append(out, &Expression{Field: field, Kind: kind, Validation: validation, eval: eval})
		return nil
	}
	for i, v := range p.Spec.Variables {
		if err := add("variable", fmt.Sprintf("spec.variables[%d] (%s)", i, v.Name), "variables."+v.Name, -1, decls); err != nil {
			return nil, err
		}
	}
	for i, m := range p.Spec.MatchConditions {
		if err := add("matchCondition", fmt.Sprintf("spec.matchConditions[%d] (%s)", i, m.Name), m.Expression, -1, decls); err != nil {
			return nil, err
		}
	}
	for i, v := range p.Spec.Validations {
		if err := add("validation", fmt.Sprintf("spec.validations[%d].expression", i), v.Expression, i, decls); err != nil {
			return nil, err
		}
		if v.MessageExpression != "" {
			if err := add("messageExpression", fmt.Sprintf("spec.validations[%d].messageExpression", i), v.MessageExpression, i, msgDecls); err != nil {
				return nil, err
			}
		}
	}
	for i, a := range p.Spec.AuditAnnotations {
		if err := add("auditAnnotation", fmt.Sprintf("spec.auditAnnotations[%d] (%s)", i, a.Key), a.ValueExpression, -1, decls); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Evaluation is the outcome of one expression on one request.
type Evaluation struct {
	Value any
	Cost  int64
	Err   error
}

// Input is one request prepared for evaluation, converted once.
type Input struct {
	versioned *admission.VersionedAttributes
	request   *admissionv1.AdmissionRequest
	params    runtime.Object
	namespace *corev1.Namespace
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
func (e *Expression) EvaluateInput(ctx context.Context, in *Input) Evaluation {
	budget := int64(celconfig.RuntimeCELCostBudget)
	results, remaining, err := e.eval.ForInput(ctx, in.versioned, in.request,
		plugincel.OptionalVariableBindings{VersionedParams: in.params, Authorizer: allowAll{}}, in.namespace, budget)
	ev := Evaluation{Cost: budget - remaining, Err: err}
	if err == nil && len(results) == 1 {
		ev.Err = results[0].Error
		if results[0].EvalResult != nil {
			ev.Value = results[0].EvalResult.Value()
		}
	}
	return ev
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
