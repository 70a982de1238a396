// Package framework is the reusable half of the end-to-end suite: one
// client per production identity, applying manifests, enforcement markers and
// polling. Providers (local control plane, kubeconfig, kind) fill an Env; the
// suites only ever see the Env, so a test runs unchanged on every provider.
package framework

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	fencev1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// Identities and namespaces that mirror a production install: the
// host is a ServiceAccount holding exactly the host Role; the operator is a
// namespace admin; break-glass is a human in a group listed in the
// FenceConfig.
const (
	HostNamespace       = "sandboxes"
	OtherHostNamespace  = "sandboxes-b"
	HostServiceAccount  = "sandbox-host"
	OtherServiceAccount = "other-host"

	HostRole        = "sandbox-host"
	HostClusterRole = "sandbox-fence-host-policy-reader"

	OperatorUser    = "sandbox-operator"
	BreakGlassUser  = "fence-breakglass"
	BreakGlassGroup = "sandbox-fence:break-glass"

	// Context names in a devcluster kubeconfig and keys of Env.Identities.
	ContextAdmin      = "admin"
	ContextHost       = "host"
	ContextOtherHost  = "other-host"
	ContextOperator   = "operator"
	ContextBreakGlass = "break-glass"

	// FieldManager names every write the harness makes.
	FieldManager = "sandbox-fence-e2e"

	WebhookConfigName = "sandbox-fence-webhook"
	WebhookNamespace  = "sandbox-fence-system"
	WebhookName       = "sandbox-fence-webhook"
	// WebhookPodSelector selects the webhook Deployment's pods.
	WebhookPodSelector = "app.kubernetes.io/name=sandbox-fence-webhook"
)

// ServiceAccountUser is the user name the apiserver gives a ServiceAccount.
func ServiceAccountUser(ns, name string) string {
	return "system:serviceaccount:" + ns + ":" + name
}

// Resources the suite touches.
var (
	SandboxGVR     = fence.SandboxGVR
	SandboxV1a1GVR = schema.GroupVersion{Group: fence.SandboxGVR.Group, Version: "v1alpha1"}.WithResource(fence.SandboxGVR.Resource)
	ClaimGVR       = fence.SandboxClaimGVR
	CNPGVR         = fence.CiliumNetworkPolicyGVR
	FenceConfigGVR = fencev1.GroupVersionResource
	CRDGVR         = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	VAPGVR         = admissionregistrationv1.SchemeGroupVersion.WithResource("validatingadmissionpolicies")
	VAPBindingGVR  = admissionregistrationv1.SchemeGroupVersion.WithResource("validatingadmissionpolicybindings")
)

// Shipped policy names (the kustomize defaults).
const (
	PolicyHolderEpoch       = "sandbox-fence-holder-epoch"
	PolicyHolderEpochRepair = "sandbox-fence-holder-epoch-repair"
	PolicyCiliumEgress      = "sandbox-fence-cilium-egress"
	PolicyCiliumOwner       = "sandbox-fence-cilium-owner"
	// PolicyStrictDelete is installed without a binding; the strict-delete
	// component adds it.
	PolicyStrictDelete = "sandbox-fence-strict-delete"
)
