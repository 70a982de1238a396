package admit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
)

var (
	ownerRefsPath = field.NewPath("metadata", "ownerReferences")
	// configLabelKeyPath names the FenceConfig's label key in an error
	// about the configuration rather than the request.
	configLabelKeyPath = field.NewPath("FenceConfig", "spec", "perSandboxLabelKey")
	selectorPath       = field.NewPath("spec", "endpointSelector", "matchLabels")
)

// ValidateCiliumOwner checks a bound host's CREATE or UPDATE (old non-nil) of
// a per-sandbox CiliumNetworkPolicy against the live owner (contract §4.4
// items 1-3). The policy CEL admits is only as good as its owner reference: with
// an invented uid, a stranger's name or a terminating owner, the selector
// would open egress for pods that are not the sandbox's, and the policy
// would linger until garbage collection noticed.
//
// UPDATE is checked exactly like CREATE: the host's 409 path replaces the
// whole body with a merge PATCH, so the new state must stand on its own.
//
// Shape rules (the name prefix, uid in the name, selector shape, egress
// allowlist) are the ValidatingAdmissionPolicy's; this validator only
// refuses shapes that leave it without an owner to look up. Warnings are
// returned for writes that are admitted but suspicious, as "<field>:
// <detail>" like the errors: the caller that shows them (the webhook's
// response, kubectl fence) names the rule family, as it does for errors.
func ValidateCiliumOwner(ctx context.Context, cfg *fencev1alpha1.FenceConfigSpec, owners OwnerLookup, old, obj *unstructured.Unstructured) (field.ErrorList, []string) {
	_ = old
	refs := obj.GetOwnerReferences()
	switch {
	case len(refs) == 0:
		return field.ErrorList{field.Required(ownerRefsPath,
			"a per-sandbox policy needs exactly one ownerReference, to the SandboxClaim or Sandbox it belongs to")}, nil
	case len(refs) > 1:
		return field.ErrorList{field.TooMany(ownerRefsPath, len(refs), 1)}, nil
	}
	ref, refPath := refs[0], ownerRefsPath.Index(0)
	kind, ok := ownerKindFor(ref.APIVersion, ref.Kind)
	if !ok {
		return field.ErrorList{field.NotSupported(refPath, ref.APIVersion+", Kind="+ref.Kind,
			[]string{ClaimOwner.String(), SandboxOwner.String()})}, nil
	}
	namePath := refPath.Child("name")
	if ref.Name == "" {
		return field.ErrorList{field.Required(namePath, "the owner's name is the selector value and cannot be empty")}, nil
	}
	// The owner's name becomes the pod label value the selector matches; a
	// name that is no valid label value can label no pod.
	if msgs := validation.IsValidLabelValue(ref.Name); len(msgs) > 0 {
		var errs field.ErrorList
		for _, m := range msgs {
			errs = append(errs, field.Invalid(namePath, ref.Name, "the owner's name must be a valid label value: "+m))
		}
		return errs, nil
	}

	ns := obj.GetNamespace()
	live, err := owners.GetOwner(ctx, kind, ns, ref.Name, Expected{UID: ref.UID, LabelKey: cfg.PerSandboxLabelKey, LabelValue: ref.Name})
	if err != nil {
		return field.ErrorList{lookupError(namePath, kind, ns, ref.Name, err)}, nil
	}

	var errs field.ErrorList
	// Name lookup, then uid compare: a uid of an owner that was deleted and
	// recreated under the same name (or an invented one) points at nothing.
	if live.GetUID() != ref.UID {
		errs = append(errs, field.Invalid(refPath.Child("uid"), string(ref.UID),
			fmt.Sprintf("the live %s %q in namespace %q has uid %q; the policy must reference its owner's current uid", kind.GVK.Kind, ref.Name, ns, live.GetUID())))
	}
	if live.GetAPIVersion() != ref.APIVersion || live.GetKind() != ref.Kind {
		errs = append(errs, field.Invalid(refPath.Child("kind"), ref.APIVersion+", Kind="+ref.Kind,
			fmt.Sprintf("the live object %q is %s, Kind=%s", ref.Name, live.GetAPIVersion(), live.GetKind())))
	}
	// A terminating owner takes its policies with it; a new policy for it
	// would outlive the sandbox it was meant for until garbage collection.
	if live.GetDeletionTimestamp() != nil {
		errs = append(errs, field.Forbidden(refPath,
			fmt.Sprintf("the %s %q is being deleted; create the policy for a live owner", kind.GVK.Kind, ref.Name)))
	}
	// The CRD's default fills the key in on every FenceConfig the API server
	// serves; an empty one was read through an older CRD.
	key := cfg.PerSandboxLabelKey
	if key == "" {
		errs = append(errs, field.Required(configLabelKeyPath,
			"the FenceConfig names no per-sandbox label key and its CRD supplies no default: apply this release's CRD first (docs/install.md, Upgrade)"))
		return errs, nil
	}
	// The selector matches pods labelled key=<owner name>; only an owner that
	// puts exactly that label on its own pods makes the selector select the
	// sandbox's pods and nobody else's.
	if got, found := kind.PodLabels(live)[key]; !found || got != ref.Name {
		detail := fmt.Sprintf("the %s %q does not carry the pod label %s=%s in %s", kind.GVK.Kind, ref.Name, key, ref.Name, strings.Join(kind.PodLabelsPath, "."))
		if found {
			detail += fmt.Sprintf(" (it has %s=%s)", key, got)
		}
		errs = append(errs, field.Invalid(namePath, ref.Name, detail+"; set the label when creating the owner"))
	}
	if len(errs) > 0 {
		return errs, nil
	}
	return checkUniqueLabel(ctx, cfg, owners, live, key, ref.Name)
}

// checkUniqueLabel looks for other claims and Sandboxes whose pods carry the
// same label: the policy would open egress for their pods
// too. A cached copy of the owner itself does not count, and neither does the
// one Sandbox a claim owns (the one it adopted, which inherits the claim's
// pod labels): it is the same sandbox. A claim has one Sandbox, so when
// several Sandboxes owned by the claim carry the label they all count, and
// objects owned by a Sandbox owner always do: however they got their owner
// reference, their pods are other pods the policy would let out.
// Refused when spec.uniqueOwnerLabel is set, a warning otherwise.
func checkUniqueLabel(ctx context.Context, cfg *fencev1alpha1.FenceConfigSpec, owners OwnerLookup, owner *unstructured.Unstructured, key, value string) (field.ErrorList, []string) {
	path := selectorPath.Key(key)
	var others, adopted []string
	for _, k := range OwnerKinds {
		items, err := owners.OwnersLabelled(ctx, k, owner.GetNamespace(), key, value)
		if err != nil {
			if !cfg.UniqueOwnerLabel {
				return nil, nil
			}
			return field.ErrorList{lookupError(path, k, owner.GetNamespace(), "", err)}, nil
		}
		for i := range items {
			it := &items[i]
			// Same kind and name is the owner itself, possibly a stale cached
			// copy with its previous uid.
			if it.GetUID() == owner.GetUID() || (k.GVK.Kind == owner.GetKind() && it.GetName() == owner.GetName()) {
				continue
			}
			if k.GVK == SandboxOwner.GVK && owner.GetKind() == ClaimOwner.GVK.Kind && ownedBy(it, owner) {
				adopted = append(adopted, k.GVK.Kind+"/"+it.GetName())
				continue
			}
			others = append(others, k.GVK.Kind+"/"+it.GetName())
		}
	}
	if len(adopted) > 1 {
		others = append(others, adopted...)
	}
	if len(others) == 0 {
		return nil, nil
	}
	slices.Sort(others)
	detail := fmt.Sprintf("the pod label %s=%s is also carried by %s, whose pods this policy would also let out", key, value, strings.Join(others, ", "))
	if cfg.UniqueOwnerLabel {
		e := field.Duplicate(path, value)
		e.Detail = detail + " (spec.uniqueOwnerLabel is set); give each sandbox its own label value"
		return field.ErrorList{e}, nil
	}
	return nil, []string{path.String() + ": " + detail + "; set spec.uniqueOwnerLabel in the FenceConfig to refuse this"}
}

func ownedBy(obj, owner *unstructured.Unstructured) bool {
	for _, r := range obj.GetOwnerReferences() {
		if r.UID == owner.GetUID() {
			return true
		}
	}
	return false
}

// lookupError turns a failed lookup into a field error. Not found is the
// answer to an invented owner, a verdict; anything else (a timeout, an API
// error) is no answer, an internal error the webhook turns into a
// retryable refusal (an unverified owner is exactly what this rule is for).
func lookupError(path *field.Path, k OwnerKind, ns, name string, err error) *field.Error {
	if apierrors.IsNotFound(err) {
		e := field.NotFound(path, name)
		e.Detail = fmt.Sprintf("no %s named %q in namespace %q; create the owner before its policy", k.GVK.Kind, name, ns)
		return e
	}
	what := fmt.Sprintf("%s in namespace %q", k.GVK.Kind, ns)
	if name != "" {
		what = fmt.Sprintf("%s %q in namespace %q", k.GVK.Kind, name, ns)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return field.InternalError(path, fmt.Errorf("looking up the %s timed out (%w), so the owner could not be verified", what, err))
	}
	return field.InternalError(path, fmt.Errorf("looking up the %s failed (%w), so the owner could not be verified", what, err))
}
