// Package admit holds the webhook's rules: the checks of contract §4.4 items 1-3
// (the owner of a per-sandbox CiliumNetworkPolicy is a live object that
// labels its own pods). They need the live state of other objects, which CEL
// in a ValidatingAdmissionPolicy cannot read; every shape rule CEL can express lives in the shipped policies
// (policies/) and is deliberately not repeated here.
//
// Validators are pure: they read the cluster only through OwnerLookup and
// return a field.ErrorList whose paths name the offending field of the
// request, so a denial reaches the client as 422 Invalid with
// details.causes[].field.
package admit
