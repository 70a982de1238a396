// Package kubeversion holds the oldest Kubernetes release sandbox-fence
// supports, in one place: the e2e harness refuses to install on an older
// cluster, hack/tools/build.sh refuses to build one, the policy tests compile
// every expression at its compatibility version, and docs/install.md states
// it. A Helm chart's kubeVersion or a preflight check reuses Minimum.
package kubeversion

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/version"
)

// Minimum is the oldest supported Kubernetes release. The egress policy uses
// CEL two-variable comprehensions, which the API server accepts in a new
// policy once its compatibility version (one minor below the server) reaches
// 1.32 (policies.TestPoliciesCompileForCreate proves both sides). Build
// scripts read this line: keep it `const Minimum = "vX.Y.Z"`.
const Minimum = "v1.33.0"

// OldestTested is the oldest release CI runs the end-to-end suite on (`make
// e2e-oldest`, built from the Go module proxy by hack/tools/build.sh). It is a release of FirstWithoutCELRace's
// minor, not of Minimum's: kube-apiserver before 1.36 can exit while the suite
// changes the bundle's policies (FirstWithoutCELRace), so releases from
// Minimum up to it install and compile the policies (the policy tests compile
// every expression at MinimumCompatibility) but CI cannot run the suite there
// reliably.
const OldestTested = "v1.36.3"

// FirstWithoutCELRace is the first release whose kube-apiserver gives each
// admission policy its own CEL type for `variables`. Before it, every policy
// compiled into one shared type, so compiling a policy (created or changed)
// while another policy was evaluated could end the process with "fatal
// error: concurrent map read and map write" (kubernetes/kubernetes#135757,
// fixed by #135759 in 1.36.0; v1.33.13, v1.34.13 and v1.35.10 still share
// it). The controller rewrites the bundle's policies on every FenceConfig
// change, so on older releases each change is a chance of that crash.
const FirstWithoutCELRace = "v1.36.0"

// HasCELRace tells whether v is older than FirstWithoutCELRace.
func HasCELRace(v *version.Version) bool {
	return v.LessThan(version.MustParseGeneric(FirstWithoutCELRace))
}

// MinimumCompatibility is the CEL compatibility version a server of the
// Minimum release offers to new policies: one minor below it.
func MinimumCompatibility() *version.Version {
	v := version.MustParseGeneric(Minimum)
	return version.MajorMinor(v.Major(), v.Minor()-1)
}

// Check refuses a server older than Minimum. gitVersion is what /version
// reports (v1.33.13, v1.34.0-rc.1, v1.33.5-gke.100, ...).
func Check(gitVersion string) error {
	got, err := version.ParseGeneric(gitVersion)
	if err != nil {
		return fmt.Errorf("Kubernetes version %q cannot be read: %w", gitVersion, err)
	}
	min := version.MustParseGeneric(Minimum)
	if got.LessThan(min) {
		return fmt.Errorf("Kubernetes %s is older than %s, the oldest release sandbox-fence supports (docs/install.md): the policies use CEL its API server does not accept", gitVersion, Minimum)
	}
	return nil
}
