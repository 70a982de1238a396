package admit

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
)

var preconditionPath = field.NewPath("preconditions", "resourceVersion")

// ValidateSandboxDelete checks a bound host's DELETE of a Sandbox under
// strict delete (contract §8.4, off unless spec.strictDelete). Once a workspace
// carries an epoch above 0 a holder fenced it, and an unconditional DELETE
// from a stale holder would destroy it under the new holder's feet; the
// fenced DELETE (contract §3.4) carries preconditions.resourceVersion from the
// read that checked the epoch, so the server refuses it (409) if anything
// moved since. The precondition itself is enforced by the API server; this
// rule only requires that one is sent.
//
// old is the stored object (the request's oldObject); nil means it could not
// be read, which is treated like a malformed epoch: the rule fails closed.
// opts is the request's DeleteOptions (nil when it sent none).
func ValidateSandboxDelete(cfg *fencev1alpha1.FenceConfigSpec, old *unstructured.Unstructured, opts *metav1.DeleteOptions) field.ErrorList {
	if !cfg.StrictDelete {
		return nil
	}
	if opts != nil && opts.Preconditions != nil && opts.Preconditions.ResourceVersion != nil && *opts.Preconditions.ResourceVersion != "" {
		return nil
	}
	var stored string
	if old == nil {
		stored = "the stored Sandbox could not be read"
	} else {
		switch state, n := ReadEpoch(old.GetAnnotations()); state {
		case EpochAbsent:
			return nil
		case EpochWell:
			if n == 0 {
				return nil
			}
			stored = fmt.Sprintf("the stored holder epoch is %d", n)
		default:
			stored = fmt.Sprintf("the stored holder epoch %q is malformed", old.GetAnnotations()[EpochAnnotation])
		}
	}
	return field.ErrorList{field.Required(preconditionPath,
		stored+"; with spec.strictDelete set, deleting a fenced Sandbox must be a fenced DELETE carrying preconditions.resourceVersion of the read that checked the epoch (contract §3.4)")}
}
