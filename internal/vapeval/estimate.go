package vapeval

import (
	"fmt"
	"math"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/util/version"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/common"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/library"
	"k8s.io/apiserver/pkg/cel/openapi"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// Unbounded is the static estimate of an expression CEL's estimator cannot
// bound (it saturates at the largest uint64).
const Unbounded = math.MaxUint64

// StaticCosts estimates the worst-case cost of every expression (keyed by
// the same Field as CompileExpressions) with CEL's static estimator and the
// Kubernetes cost model (library.CostEstimator), object, oldObject and params
// typed by their schemas, the way the API server estimates CRD validation
// rules: a string or list without maxLength/maxItems is assumed as large as
// a request can carry. The estimator ignores size guards, so it overstates
// guarded expressions; TestCELCost measures the real cost.
func StaticCosts(p *admissionregistrationv1.ValidatingAdmissionPolicy, object, params *spec.Schema) (map[string]uint64, error) {
	objType := declType(object, "Object")
	paramsType := declType(params, "Params")
	hasParams := p.Spec.ParamKind != nil
	opts := []cel.EnvOption{}
	var decls []*apiservercel.DeclType
	for _, t := range []struct {
		names []string
		t     *apiservercel.DeclType
	}{
		{[]string{plugincel.NamespaceVarName}, plugincel.BuildNamespaceType()},
		{[]string{plugincel.RequestVarName}, plugincel.BuildRequestType()},
		{[]string{plugincel.ObjectVarName, plugincel.OldObjectVarName}, objType},
		{[]string{plugincel.ParamsVarName}, paramsType},
	} {
		if t.names[0] == plugincel.ParamsVarName && !hasParams {
			continue
		}
		ct := cel.DynType
		if t.t != nil {
			decls = append(decls, t.t)
			ct = t.t.CelType()
		}
		for _, n := range t.names {
			opts = append(opts, cel.Variable(n, ct))
		}
	}
	opts = append(opts, cel.Variable("authorizer", library.AuthorizerType))
	envSet, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0), EnvOptions: opts, DeclTypes: decls,
	})
	if err != nil {
		return nil, err
	}
	c, err := plugincel.NewCompositedCompilerForTypeChecking(envSet)
	if err != nil {
		return nil, err
	}
	// As validating.TypeChecker does: compile with the typed environment,
	// keeping each variable's output type, without building programs.
	c.Compiler = typedCompiler{c}
	varDecls := plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true}
	var vars []plugincel.NamedExpressionAccessor
	for i := range p.Spec.Variables {
		vars = append(vars, namedVariable{p.Spec.Variables[i]})
	}
	c.CompileAndStoreVariables(vars, varDecls, environment.StoredExpressions)
	env, err := c.Env(environment.StoredExpressions)
	if err != nil {
		return nil, err
	}
	sizes := &sizeEstimator{roots: map[string]*apiservercel.DeclType{
		plugincel.ObjectVarName: objType, plugincel.OldObjectVarName: objType, plugincel.ParamsVarName: paramsType,
	}}
	out := map[string]uint64{}
	estimate := func(field, expr string) error {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			return fmt.Errorf("%s: %w", field, iss.Err())
		}
		est, err := env.EstimateCost(ast, &library.CostEstimator{SizeEstimator: sizes})
		if err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		out[field] = est.Max
		return nil
	}
	for _, src := range sources(p) {
		if err := estimate(src.Field, src.Expression); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func declType(s *spec.Schema, name string) *apiservercel.DeclType {
	if s == nil {
		return nil
	}
	t := common.SchemaDeclType(&openapi.Schema{Schema: s}, true)
	if t == nil {
		return nil
	}
	return t.MaybeAssignTypeName(name)
}

// sizeEstimator gives the estimator the schema's bounds (maxLength,
// maxItems, or the request-size default) for paths under object, oldObject
// and params, as the API server's CRD rule compiler does.
type sizeEstimator struct {
	roots map[string]*apiservercel.DeclType
}

func (s *sizeEstimator) EstimateSize(element checker.AstNode) *checker.SizeEstimate {
	path := element.Path()
	if len(path) == 0 {
		return nil
	}
	t := s.roots[path[0]]
	if t == nil {
		return nil
	}
	for _, name := range path[1:] {
		switch name {
		case "@items", "@values":
			t = t.ElemType
		case "@keys":
			t = t.KeyType
		default:
			f, ok := t.Fields[name]
			if !ok || f.Type == nil {
				return nil
			}
			t = f.Type
		}
		if t == nil {
			return nil
		}
	}
	return &checker.SizeEstimate{Min: 0, Max: uint64(t.MaxElements)}
}

func (s *sizeEstimator) EstimateCallCost(function, overloadID string, target *checker.AstNode, args []checker.AstNode) *checker.CallEstimate {
	return nil
}

type typedCompiler struct{ c *plugincel.CompositedCompiler }

func (t typedCompiler) CompileCELExpression(a plugincel.ExpressionAccessor, _ plugincel.OptionalVariableDeclarations, mode environment.Type) plugincel.CompilationResult {
	env, err := t.c.Env(mode)
	if err != nil {
		return plugincel.CompilationResult{Error: &apiservercel.Error{Type: apiservercel.ErrorTypeInternal, Detail: err.Error()}, ExpressionAccessor: a}
	}
	ast, iss := env.Compile(a.GetExpression())
	if iss.Err() != nil {
		return plugincel.CompilationResult{Error: &apiservercel.Error{Type: apiservercel.ErrorTypeInvalid, Detail: iss.Err().Error()}, ExpressionAccessor: a}
	}
	return plugincel.CompilationResult{OutputType: ast.OutputType(), ExpressionAccessor: a}
}
