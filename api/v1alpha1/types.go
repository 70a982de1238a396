package v1alpha1

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
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

	// DefaultNamespace is the webhook's namespace as config/ installs it;
	// the CRD's rule refusing the webhook's own ServiceAccount as a host
	// names it.
	DefaultNamespace = "sandbox-fence-system"

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

// FenceConfig configures sandbox-fence's admission policies and webhook. The
// controller in the webhook binary renders it into the shipped
// ValidatingAdmissionPolicies (their variable config) and the webhook
// configuration (internal/policyconfig), and the webhook reads it. Cluster-scoped, so that no host (a
// namespaced identity) can write it. The schema refuses malformed
// configuration at write time, so the policies never see one.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=sandbox-fence
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Hosts",type=string,JSONPath=".spec.hosts[*].username",description="bound host identities"
// +kubebuilder:printcolumn:name="Label-Key",type=string,JSONPath=".spec.perSandboxLabelKey"
// +kubebuilder:printcolumn:name="Rendered",type=string,JSONPath=".status.conditions[?(@.type==\"Rendered\")].status",description="whether the policies enforce this generation"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
// +kubebuilder:subresource:status
type FenceConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec FenceConfigSpec `json:"spec"`
	// Status is written by the controller in the webhook binary.
	//
	// +optional
	Status FenceConfigStatus `json:"status,omitempty"`
}

// ConditionRendered is the condition the controller keeps on a FenceConfig:
// True when every policy and the webhook configuration that read it enforce
// its current generation (condition's observedGeneration), False with the
// reason otherwise.
const ConditionRendered = "Rendered"

// FenceConfigStatus reports whether the configuration is in force.
type FenceConfigStatus struct {
	// Conditions: Rendered.
	//
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// The version gate below compiles for a new CRD from the CEL environment of
// Kubernetes 1.32 on, which a server offers one minor later: exactly
// kubeversion.Minimum, like the policies this CRD configures
// (TestFenceConfigCRDCompilesFromTheMinimumOnly).

// FenceConfigSpec is the whole configuration. Every field is optional; the
// empty spec fences nobody and lets nobody repair an epoch.
//
// The first rule is a version gate and always holds: an API server older
// than Kubernetes 1.33 cannot compile it (a two-variable comprehension, as
// the policies use), so it refuses this CRD, which install.yaml and the
// Helm chart create before anything else.
//
// +kubebuilder:validation:XValidation:rule="[0].all(i, v, i == v)",message="sandbox-fence needs Kubernetes 1.33 or later: this API server's CEL lacks two-variable comprehensions, which the policies use (docs/install.md, Prerequisites)"
// +kubebuilder:validation:XValidation:rule="!has(self.hosts) || !has(self.breakGlass) || !has(self.breakGlass.users) || self.hosts.all(h, !(h.username in self.breakGlass.users))",message="a host identity can never be break-glass (contract §8.5); remove it from breakGlass.users",fieldPath=".breakGlass.users"
// +kubebuilder:validation:XValidation:rule="!has(self.hosts) || self.hosts.map(h, has(h.namespaces) ? h.namespaces.size() : 0).sum() <= 512",message="at most 512 namespaces in all hosts' lists: the policies carry the configuration as a CEL constant, which the API server bounds (docs/install.md, Limits)",fieldPath=".hosts"
// +kubebuilder:validation:XValidation:rule="!has(self.hosts) || self.hosts.map(h, !has(h.namespaceSelector) ? 0 : (has(h.namespaceSelector.matchLabels) ? h.namespaceSelector.matchLabels.size() : 0) + (has(h.namespaceSelector.matchExpressions) ? h.namespaceSelector.matchExpressions.map(e, 1 + (has(e.values) ? e.values.size() : 0)).sum() : 0)).sum() <= 32",message="at most 32 selector terms (matchLabels entries, matchExpressions and their values) in all hosts' namespaceSelectors: the policies carry the configuration as a CEL constant, which the API server bounds (docs/install.md, Limits)",fieldPath=".hosts"
type FenceConfigSpec struct {
	// Hosts are the bound host identities. The CiliumNetworkPolicy fence
	// applies to exactly these users, and only in their namespaces.
	//
	// +optional
	// +listType=map
	// +listMapKey=username
	// +kubebuilder:validation:MaxItems=64
	Hosts []Host `json:"hosts,omitempty"`

	// PerSandboxLabelKey is the pod label selecting one sandbox's pods in its
	// per-sandbox egress policy. The API server fills in the default,
	// sandbox.namzu.ai/per-sandbox-egress (pkg/fence's
	// DefaultPerSandboxLabelKey, TestTheCRDDefaultIsTheHostLibrarysLabelKey),
	// on create and on every read of an object stored without it, so the
	// policies and the webhook read it without a fallback of their own.
	//
	// The pattern is a qualified label key: an optional DNS-subdomain
	// prefix, then a name of at most 63 characters.
	//
	// +optional
	// +kubebuilder:default="sandbox.namzu.ai/per-sandbox-egress"
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="!self.contains('/') || self.split('/')[0].size() <= 253",message="the prefix of perSandboxLabelKey must be at most 253 characters"
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('io.kubernetes.') && !self.startsWith('io.cilium.')",message="perSandboxLabelKey may not be under io.kubernetes. or io.cilium.: Cilium derives those labels itself (a pod's namespace, its ServiceAccount, policy names), so a selector on one would match pods the owner never labelled (contract §4.3 rule 4)"
	PerSandboxLabelKey string `json:"perSandboxLabelKey,omitempty"`

	// BreakGlass are the identities that may repair a malformed holder
	// epoch, which everyone else may only carry along unchanged. Default
	// none. Never a host: the schema refuses a username listed in both.
	//
	// +optional
	BreakGlass BreakGlass `json:"breakGlass,omitempty"`

	// StrictDelete, with the binding of config/vap/components/strict-delete,
	// refuses a bound host's DELETE of a Sandbox whose stored epoch is above
	// 0, or of any SandboxClaim, unless it carries
	// preconditions.resourceVersion, so a stale holder cannot delete a
	// workspace its successor holds. Off by default.
	//
	// +optional
	StrictDelete bool `json:"strictDelete,omitempty"`

	// UniqueOwnerLabel makes the webhook refuse a per-sandbox policy whose
	// selector value another claim or Sandbox in the namespace also carries,
	// since that policy would also open egress for the other's pods. Off by
	// default: such a write is then admitted with a warning.
	//
	// +optional
	UniqueOwnerLabel bool `json:"uniqueOwnerLabel,omitempty"`
}

// Host is one bound host identity, bound in the namespaces its list names
// or its selector matches (at least one of the two).
//
// +kubebuilder:validation:XValidation:rule="has(self.namespaces) || has(self.namespaceSelector)",message="a host needs namespaces, namespaceSelector or both: the namespaces it is bound in",fieldPath=".namespaces"
type Host struct {
	// Username is the host's ServiceAccount,
	// system:serviceaccount:<namespace>:<name>: the webhook checks
	// ServiceAccounts only, and never those of kube-system, where the
	// cluster's controllers run.
	//
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=339
	// +kubebuilder:validation:XValidation:rule="self.matches('^system:serviceaccount:[a-z0-9]([-a-z0-9]*[a-z0-9])?:[a-z0-9]([-.a-z0-9]*[a-z0-9])?$')",message="a bound host must be a ServiceAccount, system:serviceaccount:<namespace>:<name>; the webhook verifies the owners of ServiceAccounts' policies only, so any other identity would skip those checks (contract §8.7)"
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('system:serviceaccount:kube-system:')",message="a kube-system ServiceAccount can never be a bound host: the cluster's controllers (the garbage collector, the namespace controller) run there, and the fence never stands in their way (contract §8.7)"
	// +kubebuilder:validation:XValidation:rule="self != 'system:serviceaccount:sandbox-fence-system:sandbox-fence-webhook'",message="the webhook's own ServiceAccount can never be a bound host (contract §8.7)"
	Username string `json:"username"`

	// Namespaces are the namespaces in which this host drives sandboxes,
	// by name. The host is bound in a namespace listed here or matched by
	// NamespaceSelector; a write by the host in any other fenced namespace
	// is refused.
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespaces []string `json:"namespaces,omitempty"`

	// NamespaceSelector binds the host in every namespace whose labels it
	// matches, however many: the way to bind a host past what a list can
	// carry. Namespace labels are written by cluster admins, never by a
	// host (contract §4.7).
	//
	// +optional
	NamespaceSelector *NamespaceSelector `json:"namespaceSelector,omitempty"`
}

// NamespaceSelector is a label selector over namespaces: the requirements of
// MatchLabels and MatchExpressions all hold. It is metav1.LabelSelector's
// meaning, narrowed so the schema can bound it: the policies carry every
// selector in a CEL constant of bounded size and match it on every request,
// and metav1.LabelSelector bounds neither its labels nor its values. It
// must not be empty: an empty selector would bind the host in every
// namespace of the cluster, its neighbours' included.
//
// +kubebuilder:validation:XValidation:rule="(has(self.matchLabels) ? self.matchLabels.size() : 0) + (has(self.matchExpressions) ? self.matchExpressions.size() : 0) > 0",message="an empty namespaceSelector would bind the host in every namespace; give it matchLabels or matchExpressions"
type NamespaceSelector struct {
	// MatchLabels: the namespace carries each of these labels with exactly
	// this value.
	//
	// +optional
	// +kubebuilder:validation:MaxProperties=4
	// The keys' length is bounded, not their grammar: a key no label can
	// have only matches no namespace, and a regular expression over each key
	// of a map costs more than the API server allows a CRD rule (TestCRDsAreValid).
	//
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.size() <= 317)",message="matchLabels keys are label keys, at most 317 characters"
	MatchLabels map[string]LabelValue `json:"matchLabels,omitempty"`

	// MatchExpressions: each requirement holds for the namespace's labels.
	//
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4
	MatchExpressions []NamespaceSelectorRequirement `json:"matchExpressions,omitempty"`
}

// LabelValue is a label's value.
//
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$`
type LabelValue string

// NamespaceSelectorRequirement is one requirement on a namespace's labels,
// with metav1.LabelSelectorRequirement's operators and meaning: In, the
// label is set to one of Values; NotIn, it is unset or set to none of them;
// Exists, it is set; DoesNotExist, it is unset.
//
// +kubebuilder:validation:XValidation:rule="(self.operator in ['In', 'NotIn']) == (has(self.values) && self.values.size() > 0)",message="values must be non-empty for In and NotIn, and empty for Exists and DoesNotExist"
type NamespaceSelectorRequirement struct {
	// Key is the label key.
	//
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`
	Key string `json:"key"`
	// Operator is In, NotIn, Exists or DoesNotExist.
	//
	// +kubebuilder:validation:Enum=In;NotIn;Exists;DoesNotExist
	Operator string `json:"operator"`
	// Values are label values, for In and NotIn.
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$`
	Values []string `json:"values,omitempty"`
}

// BreakGlass lists the identities allowed to repair a malformed epoch.
// Break-glass is for a named few: the groups every user or every
// ServiceAccount belongs to, and system:masters (whose members bypass
// RBAC, so naming them would also name every kubeconfig of the cluster's
// creator), are refused.
type BreakGlass struct {
	// Users are user names, matched exactly.
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:Pattern=`^[^\x00-\x1f\x7f]+$`
	Users []string `json:"users,omitempty"`

	// Groups are group names; a member of any of them is break-glass.
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:Pattern=`^[^\x00-\x1f\x7f]+$`
	// +kubebuilder:validation:XValidation:rule="self.all(g, !(g in ['system:authenticated', 'system:unauthenticated', 'system:serviceaccounts', 'system:masters']) && !g.startsWith('system:serviceaccounts:'))",message="break-glass groups must name a few people: system:authenticated, system:unauthenticated, system:serviceaccounts, system:serviceaccounts:<namespace> and system:masters are refused (contract §8.5)"
	Groups []string `json:"groups,omitempty"`
}

// FenceConfigList is a list of FenceConfig.
//
// +kubebuilder:object:root=true
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

// HostFor returns the host entry for username, or nil when it is not bound.
func (s *FenceConfigSpec) HostFor(username string) *Host {
	for i := range s.Hosts {
		if s.Hosts[i].Username == username {
			return &s.Hosts[i]
		}
	}
	return nil
}

// Binds reports whether h is bound in the namespace named ns whose labels
// are nsLabels: ns is in its list, or its selector matches the labels. The
// egress policy's variable ownNamespace is the same rule in CEL.
func (h *Host) Binds(ns string, nsLabels map[string]string) bool {
	return slices.Contains(h.Namespaces, ns) || h.NamespaceSelector.Matches(nsLabels)
}

// Matches reports whether s selects a namespace with these labels, by
// apimachinery's own label selector; a nil selector matches nothing (a host
// without one is bound by its list only). A selector apimachinery refuses
// (a matchLabels key no label can have, which the schema does not parse)
// matches nothing either, as no namespace can carry that key.
func (s *NamespaceSelector) Matches(nsLabels map[string]string) bool {
	if s == nil {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(s.LabelSelector())
	return err == nil && sel.Matches(labels.Set(nsLabels))
}

// LabelSelector is s as the metav1.LabelSelector it narrows.
func (s *NamespaceSelector) LabelSelector() *metav1.LabelSelector {
	ls := &metav1.LabelSelector{}
	for k, v := range s.MatchLabels {
		if ls.MatchLabels == nil {
			ls.MatchLabels = map[string]string{}
		}
		ls.MatchLabels[k] = string(v)
	}
	for _, e := range s.MatchExpressions {
		ls.MatchExpressions = append(ls.MatchExpressions, metav1.LabelSelectorRequirement{
			Key: e.Key, Operator: metav1.LabelSelectorOperator(e.Operator), Values: e.Values})
	}
	return ls
}
