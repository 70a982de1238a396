// Package v1alpha1 holds FenceConfig, the one configuration object of
// sandbox-fence. The same object is the parameter of the shipped
// ValidatingAdmissionPolicies (paramKind) and the configuration the webhook
// reads, so the two enforcers can never disagree about who is fenced.
//
// +groupName=fence.sandbox.namzu.ai
package v1alpha1
