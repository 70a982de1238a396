// Package upstream finds the third-party CRDs the tests check the policies
// against: agent-sandbox's (vendored under config/crd/testdata/upstream, or a
// directory named by $SANDBOX_FENCE_UPSTREAM_CRDS) and Cilium's
// CiliumNetworkPolicy CRD, read from the github.com/cilium/cilium module.
// Neither is ever optional: a missing CRD is an error, never a skip or a
// quiet fallback to the project's subsets.
package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/sandbox-fence/sandbox-fence/internal/ciliumversion"
)

// EnvAgentSandboxCRDs names a directory holding agent-sandbox's CRD files,
// named as upstream names them (agents.x-k8s.io_sandboxes.yaml, ...). It has
// this one meaning everywhere: the policy tests type-check against that
// directory instead of the vendored copy, and the e2e suite installs the
// CRDs from it instead of the project's subsets.
const EnvAgentSandboxCRDs = "SANDBOX_FENCE_UPSTREAM_CRDS"

// VendoredAgentSandbox is the vendored copy, relative to the repository root.
const VendoredAgentSandbox = "config/crd/testdata/upstream/agent-sandbox"

// SandboxCRDFile is the Sandbox CRD's file name in such a directory.
const SandboxCRDFile = "agents.x-k8s.io_sandboxes.yaml"

const ciliumCRDPath = "pkg/k8s/apis/cilium.io/client/crds/v2/ciliumnetworkpolicies.yaml"

// AgentSandboxDir is $SANDBOX_FENCE_UPSTREAM_CRDS when set (relative paths
// are taken from the repository root), else the vendored copy. It fails when
// the directory has no Sandbox CRD.
func AgentSandboxDir(repoRoot string) (string, error) {
	dir := os.Getenv(EnvAgentSandboxCRDs)
	what := EnvAgentSandboxCRDs + "=" + dir
	if dir == "" {
		dir, what = VendoredAgentSandbox, "the vendored copy"
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(repoRoot, dir)
	}
	if _, err := os.Stat(filepath.Join(dir, SandboxCRDFile)); err != nil {
		return "", fmt.Errorf("upstream agent-sandbox CRDs (%s): %w", what, err)
	}
	return dir, nil
}

// CiliumCRD returns the path of Cilium's CiliumNetworkPolicy CRD, of the one
// Cilium version the repository pins (internal/ciliumversion), in the Go
// module cache, downloading the module through the module proxy when it is
// not there yet. It also returns that version.
func CiliumCRD(ctx context.Context, repoRoot string) (path, version string, err error) {
	version, err = ciliumversion.Read(repoRoot)
	if err != nil {
		return "", "", err
	}
	dir, err := ModuleDir(ctx, ciliumversion.Module, version)
	if err != nil {
		return "", "", err
	}
	path = filepath.Join(dir, ciliumCRDPath)
	if _, err := os.Stat(path); err != nil {
		return "", "", fmt.Errorf("%s@%s has no CiliumNetworkPolicy CRD: %w", ciliumversion.Module, version, err)
	}
	return path, version, nil
}

// ModuleDir returns the directory of module@version in the Go module cache,
// downloading it through the module proxy when it is not there yet (go mod
// download in a scratch directory: the project's go.mod never depends on
// it). It fails, never falls back, when the module cannot be had.
func ModuleDir(ctx context.Context, module, version string) (string, error) {
	scratch, err := os.MkdirTemp("", "module-dir-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(scratch)
	mod := module + "@" + version
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", mod)
	cmd.Dir = scratch
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.Output()
	var dl struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &dl); jerr == nil && dl.Error != "" {
		return "", fmt.Errorf("go mod download %s: %s", mod, dl.Error)
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("go mod download %s: %v: %s", mod, err, ee.Stderr)
		}
		return "", fmt.Errorf("go mod download %s: %w", mod, err)
	}
	if dl.Dir == "" {
		return "", fmt.Errorf("go mod download %s gave no directory: %s", mod, out)
	}
	return dl.Dir, nil
}

// OpenReportsModule publishes the policy-report API that `kubectl fence
// audit -o policyreport` writes: its Go types, which the product module
// requires, and their CRDs.
const OpenReportsModule = "github.com/openreports/reports-api"

// OpenReportsCRDs returns the paths of the Report and ClusterReport CRDs of
// the version the product module's go.mod requires, so the reports the
// suite applies are checked against the schema of the types that wrote them.
func OpenReportsCRDs(ctx context.Context, repoRoot string) (paths []string, version string, err error) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		return nil, "", err
	}
	if version, err = ciliumversion.Required(b, OpenReportsModule); err != nil {
		return nil, "", fmt.Errorf("go.mod: %w", err)
	}
	dir, err := ModuleDir(ctx, OpenReportsModule, version)
	if err != nil {
		return nil, "", err
	}
	for _, f := range []string{"openreports.io_reports.yaml", "openreports.io_clusterreports.yaml"} {
		p := filepath.Join(dir, "config", "crd", f)
		if _, err := os.Stat(p); err != nil {
			return nil, "", fmt.Errorf("%s@%s: %w", OpenReportsModule, version, err)
		}
		paths = append(paths, p)
	}
	return paths, version, nil
}
