package v1alpha1

import "strings"

// ServiceAccountPrefix opens every ServiceAccount's user name.
const ServiceAccountPrefix = "system:serviceaccount:"

// VerifiableHost is the one definition of who can be a bound host (contract
// §8.7): a ServiceAccount outside kube-system. The webhook verifies the
// owners of exactly these identities' writes, so binding any other would
// skip its checks; kube-system is where the cluster's controllers (the
// garbage collector, the namespace controller) run, and the fence never
// stands in their way. The CRD's markers on Host.Username, the policies'
// match conditions and the webhook configuration's say the same in CEL
// (TestTheBoundHostPredicateIsWrittenOnce).
func VerifiableHost(username string) bool {
	return strings.HasPrefix(username, ServiceAccountPrefix) &&
		!strings.HasPrefix(username, ServiceAccountPrefix+"kube-system:")
}
