package vapeval

import (
	"context"
	"fmt"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	schemacel "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
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
