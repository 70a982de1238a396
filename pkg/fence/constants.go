package fence

import "k8s.io/apimachinery/pkg/runtime/schema"

// Backend-owned annotations on a Sandbox. Their spelling is the wire
// contract shared with the TypeScript host: a Go host and a TypeScript host
// fence the same workspaces, so a rename here would split the fence.
const (
	// AnnotationHolderEpoch holds the holder epoch in canonical decimal.
	AnnotationHolderEpoch = "sandbox.namzu.ai/holder-epoch"
	// AnnotationOperatingModeChangedAt records, informationally, when a write
	// last changed spec.operatingMode (RFC 3339 with milliseconds, UTC).
	AnnotationOperatingModeChangedAt = "sandbox.namzu.ai/operating-mode-changed-at"
	// AnnotationPodTemplateHash holds "sha256:" + 64 lowercase hex of the
	// canonical pod template (see PodTemplateHash).
	AnnotationPodTemplateHash = "sandbox.namzu.ai/pod-template-hash"
	// LabelTemplate is the pod label naming the template of every sandbox pod.
	LabelTemplate = "sandbox.namzu.ai/template"
	// DefaultPerSandboxLabelKey is the endpointSelector label key of a
	// per-sandbox CiliumNetworkPolicy when the caller configures none.
	DefaultPerSandboxLabelKey = "sandbox.namzu.ai/per-sandbox-egress"
	// PolicyNamePrefix starts every per-sandbox policy name; the fence only
	// lets a bound host touch policies under it, which protects the operator's
	// baseline policies.
	PolicyNamePrefix = "namzu-sbx-"
)

// MaxEpoch is the largest well-formed holder epoch, 2^53-1: JavaScript's safe
// integer bound, so a TypeScript host never reads a rounded value. It is
// final: no write can raise it.
const MaxEpoch uint64 = 9007199254740991

// Operating modes of a v1beta1 Sandbox (spec.operatingMode).
const (
	ModeRunning   = "Running"
	ModeSuspended = "Suspended"
)

// Default names of the shipped egress fence; installations may rename them, so
// EgressFenceCheck takes them as options.
const (
	DefaultEgressPolicyName = "sandbox-fence-cilium-egress"
	bindingSuffix           = "-binding"
)

// Resources the host writes.
var (
	// SandboxGVR is agents.x-k8s.io/v1beta1 sandboxes.
	SandboxGVR = schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}
	// SandboxClaimGVR is extensions.agents.x-k8s.io/v1beta1 sandboxclaims.
	SandboxClaimGVR = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxclaims"}
	// CiliumNetworkPolicyGVR is cilium.io/v2 ciliumnetworkpolicies.
	CiliumNetworkPolicyGVR = schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumnetworkpolicies"}

	// SandboxGVK, SandboxClaimGVK and CiliumNetworkPolicyGVK are their kinds.
	SandboxGVK             = SandboxGVR.GroupVersion().WithKind("Sandbox")
	SandboxClaimGVK        = SandboxClaimGVR.GroupVersion().WithKind("SandboxClaim")
	CiliumNetworkPolicyGVK = CiliumNetworkPolicyGVR.GroupVersion().WithKind("CiliumNetworkPolicy")

	validatingAdmissionPolicyGVR        = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"}
	validatingAdmissionPolicyBindingGVR = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"}
)
