package vapeval

import (
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/cel/environment"
)

// source is one CEL expression of a policy, named by the field every
// report of this package uses for it, so that costs and passes
// computed apart meet on the same name.
type source struct {
	// Kind is variable, matchCondition, validation, messageExpression or
	// auditAnnotation.
	Kind  string
	Field string
	// Expression is the CEL text; Name is a variable's name.
	Expression, Name string
	// Validation is the index of the validation a validation or
	// messageExpression belongs to, -1 otherwise.
	Validation int
}

// pass is the plugin pass that evaluates a source (validator.Validate):
// "" for a variable, which is evaluated where it is read.
func (s source) pass() string {
	switch s.Kind {
	case "matchCondition":
		return "matchConditions"
	case "validation":
		return "validations"
	case "messageExpression":
		return "messageExpressions"
	case "auditAnnotation":
		return "auditAnnotations"
	}
	return ""
}

// passNames are the plugin's passes, in the order it runs them.
var passNames = []string{"matchConditions", "validations", "messageExpressions", "auditAnnotations"}

// sources lists p's expressions in declaration order: variables, match
// conditions, each validation followed by its messageExpression, audit
// annotations.
func sources(p *admissionregistrationv1.ValidatingAdmissionPolicy) []source {
	var out []source
	for i, v := range p.Spec.Variables {
		out = append(out, source{Kind: "variable", Field: fmt.Sprintf("spec.variables[%d] (%s)", i, v.Name), Expression: v.Expression, Name: v.Name, Validation: -1})
	}
	for i, m := range p.Spec.MatchConditions {
		out = append(out, source{Kind: "matchCondition", Field: fmt.Sprintf("spec.matchConditions[%d] (%s)", i, m.Name), Expression: m.Expression, Validation: -1})
	}
	for i, v := range p.Spec.Validations {
		out = append(out, source{Kind: "validation", Field: fmt.Sprintf("spec.validations[%d].expression", i), Expression: v.Expression, Validation: i})
		if v.MessageExpression != "" {
			out = append(out, source{Kind: "messageExpression", Field: fmt.Sprintf("spec.validations[%d].messageExpression", i), Expression: v.MessageExpression, Validation: i})
		}
	}
	for i, a := range p.Spec.AuditAnnotations {
		out = append(out, source{Kind: "auditAnnotation", Field: fmt.Sprintf("spec.auditAnnotations[%d] (%s)", i, a.Key), Expression: a.ValueExpression, Validation: -1})
	}
	return out
}

// compiler is p's variables compiled into one composited compiler, as
// compilePolicy in the plugin compiles them, with the declarations of its
// passes: a messageExpression has no authorizer.
type compiler struct {
	*plugincel.CompositedCompiler
	decls, msgDecls plugincel.OptionalVariableDeclarations
}

func newCompiler(p *admissionregistrationv1.ValidatingAdmissionPolicy) (*compiler, error) {
	hasParams := p.Spec.ParamKind != nil
	c, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		return nil, err
	}
	out := &compiler{
		CompositedCompiler: c,
		decls:              plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true},
		msgDecls:           plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: false},
	}
	var vars []plugincel.NamedExpressionAccessor
	for i := range p.Spec.Variables {
		vars = append(vars, namedVariable{p.Spec.Variables[i]})
	}
	c.CompileAndStoreVariables(vars, out.decls, environment.StoredExpressions)
	return out, nil
}

// declsFor are the declarations the plugin compiles a pass with.
func (c *compiler) declsFor(pass string) plugincel.OptionalVariableDeclarations {
	if pass == "messageExpressions" {
		return c.msgDecls
	}
	return c.decls
}

// compile compiles exprs as one condition list of pass: one context, as
// the plugin evaluates them.
func (c *compiler) compile(pass string, exprs []plugincel.ExpressionAccessor) plugincel.ConditionEvaluator {
	return c.CompileCondition(exprs, c.declsFor(pass), environment.StoredExpressions)
}

// passSources groups p's sources by pass, in passNames' order.
func passSources(p *admissionregistrationv1.ValidatingAdmissionPolicy) [][]source {
	out := make([][]source, len(passNames))
	for _, s := range sources(p) {
		for i, name := range passNames {
			if s.pass() == name {
				out[i] = append(out[i], s)
			}
		}
	}
	return out
}

// exprsOf are the sources' expressions, for a condition list.
func exprsOf(ss []source) []plugincel.ExpressionAccessor {
	var out []plugincel.ExpressionAccessor
	for _, s := range ss {
		out = append(out, plainExpression(s.Expression))
	}
	return out
}
