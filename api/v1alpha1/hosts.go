package v1alpha1

import "strings"

// ServiceAccountPrefix opens every ServiceAccount's user name.
const ServiceAccountPrefix = "system:serviceaccount:"

// kubeSystemPrefix opens the user name of every kube-system ServiceAccount.
const kubeSystemPrefix = ServiceAccountPrefix + "kube-system:"

// VerifiableHost is the one definition of who can be a bound host (contract
// §8.7): a ServiceAccount outside kube-system. The webhook verifies the
// owners of exactly these identities' writes, so binding any other would
// skip its checks; kube-system is where the cluster's controllers (the
// garbage collector, the namespace controller) run, and the fence never
// stands in their way. The CRD's markers on Host.Username
// (policies/crd_test.go) and the policies' match conditions (their
// kube-system cases) say the same in CEL; the webhook configuration's
// shipped condition is built from VerifiableHostCEL.
func VerifiableHost(username string) bool {
	return strings.HasPrefix(username, ServiceAccountPrefix) && !strings.HasPrefix(username, kubeSystemPrefix)
}

// VerifiableHostCEL is VerifiableHost in CEL, of the string expression user.
func VerifiableHostCEL(user string) string {
	return user + ".startsWith('" + ServiceAccountPrefix + "') && !" + user + ".startsWith('" + kubeSystemPrefix + "')"
}
