package vapeval

import (
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// CRDSchemas resolves the OpenAPI schema of every served version of some
// CRDs, built the way the API server publishes them (ObjectMeta included).
type CRDSchemas map[schema.GroupVersionKind]*spec.Schema

// NewCRDSchemas builds the schemas of crds.
func NewCRDSchemas(crds ...*apiextensionsv1.CustomResourceDefinition) (CRDSchemas, error) {
	out := CRDSchemas{}
	for _, crd := range crds {
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			gvk := schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: crd.Spec.Names.Kind}
			doc, err := builder.BuildOpenAPIV3(crd, v.Name, builder.Options{})
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", crd.Name, v.Name, err)
			}
			for name, s := range doc.Components.Schemas {
				if !hasGVK(s, gvk) {
					continue
				}
				resolved, err := resolver.PopulateRefs(func(ref string) (*spec.Schema, bool) {
					s, ok := doc.Components.Schemas[strings.TrimPrefix(ref, "#/components/schemas/")]
					return s, ok
				}, "#/components/schemas/"+name)
				if err != nil {
					return nil, fmt.Errorf("%s %s: %w", crd.Name, v.Name, err)
				}
				out[gvk] = resolved
			}
			if out[gvk] == nil {
				return nil, fmt.Errorf("%s %s: no schema carries %v", crd.Name, v.Name, gvk)
			}
		}
	}
	return out, nil
}

func hasGVK(s *spec.Schema, want schema.GroupVersionKind) bool {
	list, _ := s.Extensions["x-kubernetes-group-version-kind"].([]any)
	for _, item := range list {
		m, _ := item.(map[string]any)
		if m["group"] == want.Group && m["version"] == want.Version && m["kind"] == want.Kind {
			return true
		}
	}
	return false
}

// ResolveSchema implements resolver.SchemaResolver.
func (c CRDSchemas) ResolveSchema(gvk schema.GroupVersionKind) (*spec.Schema, error) {
	if s, ok := c[gvk]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("%v: %w", gvk, resolver.ErrSchemaNotFound)
}

// NewRESTMapper maps the given resources.
func NewRESTMapper(resources []Resource) meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	for _, r := range resources {
		scope := meta.RESTScopeRoot
		if r.Namespaced {
			scope = meta.RESTScopeNamespace
		}
		m.AddSpecific(r.GVK, r.GVR(), r.GVR(), scope)
	}
	return m
}

// TypeCheck runs the TypeChecker kube-controller-manager uses to fill
// status.typeChecking over validations and message expressions, and the
// same checker over each variable and match condition, which the
// controller skips. It returns one line per warning; a policy whose kinds
// have no schema here is reported, never silently passed.
func TypeCheck(p *admissionregistrationv1.ValidatingAdmissionPolicy, schemas CRDSchemas, mapper meta.RESTMapper) []string {
	tc := &validating.TypeChecker{SchemaResolver: schemas, RestMapper: mapper}
	var out []string
	for _, w := range tc.Check(p) {
		out = append(out, w.FieldRef+": "+w.Warning)
	}
	ctx := tc.CreateContext(p)
	checked := false
	for _, r := range p.Spec.MatchConstraints.ResourceRules {
		for _, g := range r.APIGroups {
			for _, v := range r.APIVersions {
				for _, res := range r.Resources {
					gvk, err := mapper.KindFor(schema.GroupVersionResource{Group: g, Version: v, Resource: res})
					if err != nil {
						out = append(out, fmt.Sprintf("%s/%s %s: not mapped: %v", g, v, res, err))
						continue
					}
					if _, err := schemas.ResolveSchema(gvk); err != nil {
						out = append(out, fmt.Sprintf("%v: no schema to type-check against", gvk))
						continue
					}
					checked = true
				}
			}
		}
	}
	if !checked {
		out = append(out, "no matched kind has a schema: nothing was type-checked")
	}
	for i, v := range p.Spec.Variables {
		if res := tc.CheckExpression(ctx, v.Expression); len(res) > 0 {
			out = append(out, fmt.Sprintf("spec.variables[%d] (%s): %s", i, v.Name, res.String()))
		}
	}
	for i, m := range p.Spec.MatchConditions {
		if res := tc.CheckExpression(ctx, m.Expression); len(res) > 0 {
			out = append(out, fmt.Sprintf("spec.matchConditions[%d] (%s): %s", i, m.Name, res.String()))
		}
	}
	return out
}
