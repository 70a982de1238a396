package fencectl

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/internal/admit"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// Epoch is the holder epoch as a host reads it: absent, a canonical decimal,
// or malformed.
type Epoch struct {
	// State is Absent, WellFormed or Malformed.
	State string `json:"state"`
	// Value is the stored string when present.
	Value string `json:"value,omitempty"`
}

// Link is one object of an owner chain.
type Link struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	UID  string `json:"uid,omitempty"`
	// Missing: named by the link before it but not found.
	Missing bool `json:"missing,omitempty"`
}

// EgressPolicy is the Sandbox's per-sandbox CiliumNetworkPolicy.
type EgressPolicy struct {
	Name string `json:"name"`
	// OwnerChain runs from the policy through its ownerReference to the
	// Sandbox (a claim's policy: policy, claim, Sandbox).
	OwnerChain []Link `json:"ownerChain"`
	// Problems are the webhook's owner checks, the ones that need the live
	// cluster, that fail today.
	Problems []string `json:"problems"`
}

// SandboxStatus is the output of `kubectl fence status SANDBOX`.
type SandboxStatus struct {
	APIVersion    string `json:"apiVersion"`
	Kind          string `json:"kind"`
	Namespace     string `json:"namespace"`
	Name          string `json:"name"`
	UID           string `json:"uid"`
	OperatingMode string `json:"operatingMode"`
	HolderEpoch   Epoch  `json:"holderEpoch"`
	// OperatingModeChangedAt and PodTemplateHash are the other backend
	// annotations, as stored.
	OperatingModeChangedAt string `json:"operatingModeChangedAt,omitempty"`
	PodTemplateHash        string `json:"podTemplateHash,omitempty"`
	// Claim is the SandboxClaim that owns the Sandbox (pooled path), if any.
	Claim string `json:"claim,omitempty"`
	// Enforcement is the mode of the installed bindings.
	Enforcement string `json:"enforcement"`
	// EgressPolicies are the per-sandbox policies of the Sandbox and of its
	// claim (normally at most one).
	EgressPolicies []EgressPolicy `json:"egressPolicies"`
}

// Status reads one Sandbox and its per-sandbox policy.
func Status(ctx context.Context, c Clients, o Options, namespace, name string) (*SandboxStatus, error) {
	sbx, err := c.Dynamic.Resource(sandboxGVR).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading Sandbox %s/%s: %w", namespace, name, err)
	}
	in, err := readInstalled(ctx, c, o)
	if err != nil {
		return nil, err
	}
	st := &SandboxStatus{APIVersion: fencev1alpha1.GroupVersion.String(), Kind: "SandboxStatus",
		Namespace: namespace, Name: name, UID: string(sbx.GetUID()), EgressPolicies: []EgressPolicy{}}
	st.OperatingMode, _, _ = unstructured.NestedString(sbx.Object, "spec", "operatingMode")
	r := fence.ReadHolderEpoch(sbx)
	st.HolderEpoch = Epoch{State: r.State.String(), Value: r.Raw}
	ann := sbx.GetAnnotations()
	st.OperatingModeChangedAt = ann[fence.AnnotationOperatingModeChangedAt]
	st.PodTemplateHash = ann[fence.AnnotationPodTemplateHash]
	if m, why := in.mode(); m != "" {
		st.Enforcement = string(m)
	} else {
		st.Enforcement = "inconsistent (" + why + ")"
	}

	spec := fencev1alpha1.FenceConfigSpec{}
	if in.config != nil {
		spec = in.config.Spec
	}
	lookup := liveOwners{c}
	// The pool-less path names the policy after the Sandbox; the pooled
	// path after the claim that owns it, the owner the host names in the
	// policy's ownerReference.
	candidates := []*unstructured.Unstructured{sbx}
	for _, ref := range sbx.GetOwnerReferences() {
		if ref.Kind != admit.ClaimOwner.GVK.Kind || ref.APIVersion != admit.ClaimOwner.GVK.GroupVersion().String() {
			continue
		}
		st.Claim = ref.Name
		claim, err := c.Dynamic.Resource(claimGVR).Namespace(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err == nil {
			candidates = append(candidates, claim)
		} else if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading SandboxClaim %s/%s: %w", namespace, ref.Name, err)
		}
	}
	for _, owner := range candidates {
		pname := fence.PolicyNamePrefix + string(owner.GetUID())
		cnp, err := c.Dynamic.Resource(cnpGVR).Namespace(namespace).Get(ctx, pname, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading CiliumNetworkPolicy %s/%s: %w", namespace, pname, err)
		}
		p := EgressPolicy{Name: pname, OwnerChain: []Link{{Kind: "CiliumNetworkPolicy", Name: pname, UID: string(cnp.GetUID())}}, Problems: []string{}}
		for _, ref := range cnp.GetOwnerReferences() {
			l := Link{Kind: ref.Kind, Name: ref.Name, UID: string(ref.UID)}
			l.Missing = ref.UID != owner.GetUID()
			p.OwnerChain = append(p.OwnerChain, l)
		}
		if owner != sbx {
			p.OwnerChain = append(p.OwnerChain, Link{Kind: "Sandbox", Name: name, UID: st.UID})
		}
		errs, warnings := admit.ValidateCiliumOwner(ctx, &spec, lookup, nil, cnp)
		var problems []string
		for _, e := range errs {
			problems = append(problems, e.Error())
		}
		for _, m := range append(problems, warnings...) {
			p.Problems = append(p.Problems, admit.CiliumFamily.Message(m))
		}
		st.EgressPolicies = append(st.EgressPolicies, p)
	}
	return st, nil
}

// liveOwners answers the owner checks with live reads, as the webhook does
// on a cache miss.
type liveOwners struct{ c Clients }

func (l liveOwners) GetOwner(ctx context.Context, k admit.OwnerKind, ns, name string, _ admit.Expected) (*unstructured.Unstructured, error) {
	return l.c.Dynamic.Resource(k.GVK.GroupVersion().WithResource(resourceOf(k))).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
}

// OwnersLabelled filters a live list: the pod labels are in the owners'
// specs, which no label selector reaches.
func (l liveOwners) OwnersLabelled(ctx context.Context, k admit.OwnerKind, ns, key, value string) ([]unstructured.Unstructured, error) {
	items, err := listAll(ctx, l.c, k.GVK.GroupVersion().WithResource(resourceOf(k)), ns, "")
	return k.Labelled(items, key, value), err
}

func resourceOf(k admit.OwnerKind) string {
	if k.GVK.Kind == admit.ClaimOwner.GVK.Kind {
		return claimGVR.Resource
	}
	return sandboxGVR.Resource
}

// String renders the status for a person.
func (st *SandboxStatus) String() string {
	var b strings.Builder
	w := func(k, v string) { fmt.Fprintf(&b, "%-22s %s\n", k+":", v) }
	w("Sandbox", st.Namespace+"/"+st.Name+" (uid "+st.UID+")")
	if st.Claim != "" {
		w("Claimed by", "SandboxClaim "+st.Claim)
	}
	w("Operating mode", orNone(st.OperatingMode))
	epoch := st.HolderEpoch.State
	if st.HolderEpoch.Value != "" {
		epoch = fmt.Sprintf("%q (%s)", st.HolderEpoch.Value, st.HolderEpoch.State)
	}
	w("Holder epoch", epoch)
	w("Mode changed at", orNone(st.OperatingModeChangedAt))
	w("Pod template hash", orNone(st.PodTemplateHash))
	w("Enforcement", st.Enforcement)
	if len(st.EgressPolicies) == 0 {
		w("Egress policy", "<none>")
	}
	for _, p := range st.EgressPolicies {
		w("Egress policy", p.Name)
		var chain []string
		for _, l := range p.OwnerChain {
			s := l.Kind + " " + l.Name
			if l.Missing {
				s += " (uid " + l.UID + ": not this owner)"
			}
			chain = append(chain, s)
		}
		w("  owner chain", strings.Join(chain, " -> "))
		if len(p.Problems) == 0 {
			w("  owner check", "ok")
		}
		for _, pr := range p.Problems {
			w("  owner check", pr)
		}
	}
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
