// Package admit holds the webhook's rules, the checks docs/contract.md gives
// the webhook (the owner of a per-sandbox CiliumNetworkPolicy is a live
// object that labels its own pods). They need the live state of other objects, which CEL
// in a ValidatingAdmissionPolicy cannot read; every shape rule CEL can express lives in the shipped policies
// (policies/) and is deliberately not repeated here.
//
// Validators are pure: they read the cluster only through OwnerLookup and
// return a field.ErrorList whose paths name the offending field of the
// request, so a denial reaches the client as 422 Invalid with
// details.causes[].field.
package admit

// Family is a rule family: the first word of every message about its rules,
// so a reader can tell which fence spoke. The webhook's
// denials, warnings and allowed reasons and kubectl fence's findings all
// write it through Message, never as a literal.
type Family string

// CiliumFamily is the family of the CiliumNetworkPolicy rules, here and in
// the sandbox-fence-cilium-* policies.
const CiliumFamily Family = "cilium-fence"

// Message opens message with the family: "cilium-fence: " + message.
func (f Family) Message(message string) string { return string(f) + ": " + message }
