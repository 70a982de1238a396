package testing

import (
	"testing"

	"github.com/sandbox-fence/sandbox-fence/internal/testing/upstream"
)

// PrometheusOperatorVersion is the prometheus-operator release whose CRD
// schemas the monitoring component (config/components/monitoring) is
// validated against, offline and by the e2e suite's server-side dry run.
const PrometheusOperatorVersion = "v0.85.0"

// PrometheusOperatorModule publishes those CRDs (example/prometheus-operator-crd).
const PrometheusOperatorModule = "github.com/prometheus-operator/prometheus-operator"

// CertManagerVersion is the cert-manager release whose CRDs the e2e suite
// installs, so its server-side dry run checks the Issuer and Certificate of
// config/webhook/overlays/cert-manager against cert-manager's own schemas.
// The one pin: moving to another release is this line.
const CertManagerVersion = "v1.21.2"

// CertManagerModule publishes those CRDs (deploy/crds, plain
// CustomResourceDefinitions).
const CertManagerModule = "github.com/cert-manager/cert-manager"

// CertManagerCRDFiles are the CRDs of the kinds the overlay renders, in the
// module's deploy/crds.
var CertManagerCRDFiles = []string{"cert-manager.io_issuers.yaml", "cert-manager.io_certificates.yaml"}

// ModuleDir returns the directory of module@version in the Go module cache,
// downloading it through the module proxy (upstream.ModuleDir). It fails the
// test when the module cannot be had: a check against an upstream schema
// must not turn into a skip.
func ModuleDir(t testing.TB, module, version string) string {
	t.Helper()
	dir, err := upstream.ModuleDir(t.Context(), module, version)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
