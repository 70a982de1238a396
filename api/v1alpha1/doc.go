// Package v1alpha1 holds FenceConfig, the one configuration object of
// sandbox-fence. The same object is the parameter of the shipped
// ValidatingAdmissionPolicies (paramKind) and the configuration the webhook
// reads, so the two enforcers can never disagree about who is fenced.
//
// The CRD (config/crd/bases/fence.sandbox.namzu.ai_fenceconfigs.yaml) and the
// deep-copy functions (zz_generated.deepcopy.go) are generated from these
// types and their kubebuilder markers by controller-gen (make generate, the
// Makefile's CONTROLLER_TOOLS_VERSION); make verify fails when either is stale. A
// type's doc comment is its field's description in the schema, which
// kubectl explain prints: write it for the admin.
//
// +kubebuilder:object:generate=true
// +groupName=fence.sandbox.namzu.ai
package v1alpha1
