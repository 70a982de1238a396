package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

const (
	// Group is the API group of sandbox-fence's own types.
	Group = "fence.sandbox.namzu.ai"
	// Version is the served and stored version of FenceConfig.
	Version = "v1alpha1"
	// Kind is the kind of the configuration object.
	Kind = "FenceConfig"
	// Resource is the plural resource name of FenceConfig.
	Resource = "fenceconfigs"

	// DefaultConfigName is the name of the FenceConfig the shipped bindings
	// and the webhook read unless told otherwise.
	DefaultConfigName = "sandbox-fence"

	// FencedNamespaceLabel opts a namespace in: the CiliumNetworkPolicy fence
	// (VAP binding and webhook) matches only namespaces labelled
	// FencedNamespaceLabel=FencedNamespaceValue. Namespaces are written by
	// cluster admins, never by a host, so a host cannot opt itself out.
	FencedNamespaceLabel = "fence.sandbox.namzu.ai/enabled"
	// FencedNamespaceValue is the label value that opts a namespace in.
	FencedNamespaceValue = "true"
)

// GroupVersion is the group and version of FenceConfig.
var GroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// GroupVersionResource is the resource the webhook watches.
var GroupVersionResource = GroupVersion.WithResource(Resource)

// FenceConfig configures sandbox-fence. It is cluster-scoped so that no
// namespace-scoped identity (in particular no host) can write it.
type FenceConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec FenceConfigSpec `json:"spec"`
}

// FenceConfigSpec is the whole configuration. Every field is optional; the
// zero value fences nobody and lets nobody repair an epoch.
type FenceConfigSpec struct {
	// Hosts are the bound host identities: the CiliumNetworkPolicy fence
	// applies to exactly these users, and only in their namespaces.
	Hosts []Host `json:"hosts,omitempty"`

	// PerSandboxLabelKey is the pod label that selects one sandbox's pods in
	// its per-sandbox egress policy. Empty means
	// fence.DefaultPerSandboxLabelKey (sandbox.namzu.ai/per-sandbox-egress).
	PerSandboxLabelKey string `json:"perSandboxLabelKey,omitempty"`

	// BreakGlass are the identities that may repair a malformed holder epoch
	// (contract §8.5). Never a host: the schema refuses a username listed in both.
	BreakGlass BreakGlass `json:"breakGlass,omitempty"`

	// StrictDelete, with the binding of config/vap/components/strict-delete,
	// makes the ValidatingAdmissionPolicy sandbox-fence-strict-delete refuse
	// a bound host's DELETE of a Sandbox whose stored epoch is above 0, and
	// of any SandboxClaim, unless it carries preconditions.resourceVersion
	// (contract §8.4). Off by default.
	StrictDelete bool `json:"strictDelete,omitempty"`

	// UniqueOwnerLabel makes the webhook refuse a per-sandbox policy whose
	// selector value is also carried by another claim or Sandbox in the
	// namespace (contract §4.4 item 3). Off by default.
	UniqueOwnerLabel bool `json:"uniqueOwnerLabel,omitempty"`
}

// Host is one bound host identity.
type Host struct {
	// Username is the host's ServiceAccount,
	// "system:serviceaccount:<namespace>:<name>" (contract §8.7). The schema
	// refuses any other identity, and kube-system ServiceAccounts: the
	// webhook routes only ServiceAccounts outside kube-system, so every
	// bound host gets every check.
	Username string `json:"username"`
	// Namespaces are the namespaces in which this host drives sandboxes. A
	// write by the host in any other fenced namespace is refused.
	Namespaces []string `json:"namespaces"`
}

// BreakGlass lists the identities allowed to repair a malformed epoch.
type BreakGlass struct {
	// Users are user names, matched exactly.
	Users []string `json:"users,omitempty"`
	// Groups are group names; a member of any of them is break-glass.
	Groups []string `json:"groups,omitempty"`
}

// FenceConfigList is a list of FenceConfig.
type FenceConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FenceConfig `json:"items"`
}

// AddToScheme registers FenceConfig and FenceConfigList.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &FenceConfig{}, &FenceConfigList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// LabelKey returns the configured per-sandbox label key, or def when unset.
func (s *FenceConfigSpec) LabelKey(def string) string {
	if s.PerSandboxLabelKey == "" {
		return def
	}
	return s.PerSandboxLabelKey
}

// HostFor returns the host entry for username, or nil when it is not bound.
func (s *FenceConfigSpec) HostFor(username string) *Host {
	for i := range s.Hosts {
		if s.Hosts[i].Username == username {
			return &s.Hosts[i]
		}
	}
	return nil
}
