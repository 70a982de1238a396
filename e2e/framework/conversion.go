package framework

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ConversionServed reports whether v1alpha1 Sandbox requests can work: the
// CRD serves v1alpha1 and converts with strategy None (the project subset, or
// upstream with spec.conversion stripped). With the upstream conversion
// webhook named but absent, every v1alpha1 request fails, so those cases skip.
func ConversionServed(ctx context.Context, e *Env) (bool, error) {
	crd, err := e.Admin.Dynamic.Resource(CRDGVR).Get(ctx, SandboxGVR.GroupResource().String(), metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	strategy, _, _ := unstructured.NestedString(crd.Object, "spec", "conversion", "strategy")
	if strategy != "" && strategy != "None" {
		return false, nil
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		vm, _ := v.(map[string]any)
		if vm["name"] == "v1alpha1" && vm["served"] == true {
			return true, nil
		}
	}
	return false, nil
}
