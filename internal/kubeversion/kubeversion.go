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

// OldestTested is the release of Minimum's minor that CI builds from the Go
// module proxy and runs the end-to-end suite on (`make e2e
// KUBERNETES_VERSION=...` in .ci/run; its tools module is committed under
// hack/tools/kubernetes-versions/).
const OldestTested = "v1.33.13"

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
