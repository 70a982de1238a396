package vapeval

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	schemacel "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/version"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"
)

// ValidateCRD runs the API server's create validation of a
// CustomResourceDefinition: a test CRD the server would refuse is useless.
func ValidateCRD(crd *apiextensionsv1.CustomResourceDefinition) (field.ErrorList, error) {
	in, err := internalCRD(crd)
	if err != nil {
		return nil, err
	}
	return apiextensionsvalidation.ValidateCustomResourceDefinition(context.Background(), in), nil
}

// CompileCRDForCreate compiles every x-kubernetes-validations rule and
// messageExpression of every version of crd as an API server whose CEL
// compatibility version is compatibility compiles them for a new CRD
// (environment.NewExpressions), and returns each one it cannot compile.
// ValidateCRD does the same at this library's own compatibility version
// only; this is how a test shows which releases refuse a CRD.
func CompileCRDForCreate(crd *apiextensionsv1.CustomResourceDefinition, compatibility *version.Version) ([]string, error) {
	in, err := internalCRD(crd)
	if err != nil {
		return nil, err
	}
	envSet := environment.MustBaseEnvSet(compatibility)
	var out []string
	var walk func(s *structuralschema.Structural, path *field.Path, root bool) error
	walk = func(s *structuralschema.Structural, path *field.Path, root bool) error {
		if s == nil {
			return nil
		}
		if len(s.XValidations) > 0 {
			results, err := schemacel.Compile(s, model.SchemaDeclType(s, root), celconfig.PerCallLimit, envSet, schemacel.NewExpressionsEnvLoader())
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			for i, r := range results {
				rule := path.Child("x-kubernetes-validations").Index(i)
				if r.Error != nil {
					out = append(out, fmt.Sprintf("%s.rule: %v (its message: %s)", rule, r.Error, s.XValidations[i].Message))
				}
				if r.MessageExpressionError != nil {
					out = append(out, fmt.Sprintf("%s.messageExpression: %v", rule, r.MessageExpressionError))
				}
			}
		}
		for name, p := range s.Properties {
			if err := walk(&p, path.Child("properties").Key(name), false); err != nil {
				return err
			}
		}
		if err := walk(s.Items, path.Child("items"), false); err != nil {
			return err
		}
		if s.AdditionalProperties != nil {
			return walk(s.AdditionalProperties.Structural, path.Child("additionalProperties"), false)
		}
		return nil
	}
	for _, v := range in.Spec.Versions {
		props := in.Spec.Validation
		if v.Schema != nil {
			props = v.Schema
		}
		if props == nil || props.OpenAPIV3Schema == nil {
			continue
		}
		structural, err := structuralschema.NewStructural(props.OpenAPIV3Schema)
		if err != nil {
			return nil, err
		}
		if err := walk(structural, field.NewPath(v.Name, "openAPIV3Schema"), true); err != nil {
			return nil, err
		}
	}
	slices.Sort(out)
	return out, nil
}

// ValidateObject validates obj against the schema of the CRD version it
// names: the OpenAPI schema and the x-kubernetes-validations rules, as the
// API server does on create.
func ValidateObject(crd *apiextensionsv1.CustomResourceDefinition, obj map[string]any) (field.ErrorList, error) {
	props, err := versionSchema(crd, obj)
	if err != nil {
		return nil, err
	}
	sv, _, err := validation.NewSchemaValidator(props.OpenAPIV3Schema)
	if err != nil {
		return nil, err
	}
	errs := validation.ValidateCustomResource(nil, obj, sv)
	structural, err := structuralschema.NewStructural(props.OpenAPIV3Schema)
	if err != nil {
		return nil, err
	}
	celErrs, _ := schemacel.NewValidator(structural, true, celconfig.PerCallLimit).
		Validate(context.Background(), nil, structural, obj, nil, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...), nil
}

// versionSchema is the schema of the CRD version obj's apiVersion names.
func versionSchema(crd *apiextensionsv1.CustomResourceDefinition, obj map[string]any) (*apiextensions.CustomResourceValidation, error) {
	in, err := internalCRD(crd)
	if err != nil {
		return nil, err
	}
	apiVersion, _ := obj["apiVersion"].(string)
	for _, v := range in.Spec.Versions {
		if in.Spec.Group+"/"+v.Name != apiVersion {
			continue
		}
		props := in.Spec.Validation
		if v.Schema != nil {
			props = v.Schema
		}
		if props == nil {
			return nil, fmt.Errorf("%s %s has no schema", crd.Name, v.Name)
		}
		return props, nil
	}
	return nil, fmt.Errorf("%s does not serve %s", crd.Name, apiVersion)
}

func internalCRD(crd *apiextensionsv1.CustomResourceDefinition) (*apiextensions.CustomResourceDefinition, error) {
	s := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := apiextensions.AddToScheme(s); err != nil {
		return nil, err
	}
	c := crd.DeepCopy()
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(c)
	out := &apiextensions.CustomResourceDefinition{}
	if err := s.Convert(c, out, nil); err != nil {
		return nil, err
	}
	return out, nil
}

// DefaultObject applies the defaults of the CRD version obj names to obj,
// in place, as the API server does to every object it serves: on create,
// and on every read of an object stored before the default existed. A
// policy's params come from the server, so they carry the defaults.
func DefaultObject(crd *apiextensionsv1.CustomResourceDefinition, obj map[string]any) error {
	props, err := versionSchema(crd, obj)
	if err != nil {
		return err
	}
	structural, err := structuralschema.NewStructural(props.OpenAPIV3Schema)
	if err != nil {
		return err
	}
	structuraldefaulting.Default(obj, structural)
	return nil
}
