// Package vapeval evaluates the shipped ValidatingAdmissionPolicies offline
// with the API server's own validating admission policy plugin
// (k8s.io/apiserver/pkg/admission/plugin/policy/validating), so that matching
// (resource rules, namespace selectors, match conditions), params, CEL and
// message expressions all behave as on a live server, and type-checks them
// with the same TypeChecker kube-controller-manager runs.
//
// It does not reproduce what only a server does: API defaulting of the policy
// objects (Defaults applies the registry defaults by hand), create-time
// validation of the policies (a case whose message contains "compilation
// error:" fails), CRD defaulting and pruning of the request object, and
// conversion between served versions.
package vapeval
