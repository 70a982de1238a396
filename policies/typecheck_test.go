package policies_test

import (
	"path/filepath"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/sandbox-fence/sandbox-fence/internal/kubeversion"
	"github.com/sandbox-fence/sandbox-fence/internal/testing/upstream"
	"github.com/sandbox-fence/sandbox-fence/internal/vapeval"
)

func loadCRDs(t testing.TB, paths ...string) []*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, p := range paths {
		crd, err := vapeval.LoadCRD(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, crd)
	}
	return out
}

func typeCheckAll(t *testing.T, crds []*apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	schemas, err := vapeval.NewCRDSchemas(crds...)
	if err != nil {
		t.Fatal(err)
	}
	mapper := vapeval.NewRESTMapper(vapeval.Resources)
	for _, p := range loadBundle(t) {
		for _, w := range vapeval.TypeCheck(p.Policy, schemas, mapper) {
			t.Errorf("%s: %s", p.Policy.Name, w)
		}
	}
}

// TestTypeCheckOwnCRDs type-checks every policy against the project's own
// test CRDs and the FenceConfig CRD.
func TestTypeCheckOwnCRDs(t *testing.T) {
	typeCheckAll(t, loadCRDs(t,
		"../config/crd/testdata/agents.x-k8s.io_sandboxes.yaml",
		"../config/crd/testdata/extensions.agents.x-k8s.io_sandboxclaims.yaml",
		"../config/crd/testdata/cilium.io_ciliumnetworkpolicies.yaml",
		"../config/crd/bases/fence.sandbox.namzu.ai_fenceconfigs.yaml"))
}

// TestTypeCheckUpstreamCRDs type-checks every policy against the real
// agent-sandbox CRDs (vendored, or $SANDBOX_FENCE_UPSTREAM_CRDS) and Cilium's
// own CiliumNetworkPolicy CRD from its module. Either missing fails the test:
// it never skips (make test downloads the Cilium module first).
func TestTypeCheckUpstreamCRDs(t *testing.T) {
	sandboxes, err := upstream.AgentSandboxDir("..")
	if err != nil {
		t.Fatal(err)
	}
	cilium, _, err := upstream.CiliumCRD(t.Context(), "..")
	if err != nil {
		t.Fatal(err)
	}
	// The claim CRD sits beside the Sandbox's: the owner policy matches claims.
	claims := filepath.Join(sandboxes, "extensions.agents.x-k8s.io_sandboxclaims.yaml")
	typeCheckAll(t, loadCRDs(t, filepath.Join(sandboxes, upstream.SandboxCRDFile), claims, cilium, fenceConfigCRD))
}

// TestPoliciesCompileForCreate compiles every expression as the API server
// validates a new policy, at the compatibility version of the oldest
// supported release (kubeversion.Minimum: a 1.33 server offers 1.32) and at
// this library's own, and shows that one version lower is refused, so the
// minimum is exact.
func TestPoliciesCompileForCreate(t *testing.T) {
	oldest := kubeversion.MinimumCompatibility()
	for _, v := range []*version.Version{oldest, environment.DefaultCompatibilityVersion()} {
		for _, p := range loadBundle(t) {
			problems, err := vapeval.CompileForCreate(p.Policy, v)
			if err != nil {
				t.Fatal(err)
			}
			for _, pr := range problems {
				t.Errorf("compatibility version %s: %s: %s", v, p.Policy.Name, pr)
			}
		}
	}
	below := version.MajorMinor(oldest.Major(), oldest.Minor()-1)
	var refused int
	for _, p := range loadBundle(t) {
		problems, err := vapeval.CompileForCreate(p.Policy, below)
		if err != nil {
			t.Fatal(err)
		}
		refused += len(problems)
	}
	if refused == 0 {
		t.Errorf("every policy compiles at compatibility version %s: lower kubeversion.Minimum (%s) and docs/install.md", below, kubeversion.Minimum)
	}
}
