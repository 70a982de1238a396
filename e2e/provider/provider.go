// Package provider gives the end-to-end suite its cluster: a local control
// plane (default), an existing cluster through a kubeconfig, or a kind
// cluster. Each returns a framework.Env with the same identities, so a suite
// never knows where it runs.
package provider

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

// Environment variables that choose and tune the provider.
const (
	// EnvProvider is local (default), kubeconfig or kind. It is explicit on
	// purpose: a developer's shell often has KUBECONFIG set for another
	// cluster, and the suite writes to the cluster it runs on.
	EnvProvider = "E2E_PROVIDER"
	// EnvKeepState keeps the local control plane's state directory (PKI,
	// logs, etcd data) after the run.
	EnvKeepState = "E2E_KEEP_STATE"
	// EnvImageArchive is the webhook image tarball the kind provider loads.
	EnvImageArchive = "E2E_IMAGE_ARCHIVE"
	// EnvKindCluster names the kind cluster.
	EnvKindCluster = "KIND_CLUSTER"
)

// Provider brings a cluster up with the bundle installed and tears it down.
type Provider interface {
	Name() string
	Setup(ctx context.Context) (*framework.Env, error)
	// Teardown ends what Setup started. failed asks for logs to be kept in
	// artifactDir (may be "").
	Teardown(ctx context.Context, failed bool, artifactDir string) error
}

// FromEnv chooses the provider from $E2E_PROVIDER.
func FromEnv(logf framework.Logf) (Provider, error) {
	root, err := framework.RepoRoot()
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(root, "bin")
	if e := os.Getenv(framework.EnvEnforcer); e != "" && e != framework.ShippedEnforcer && os.Getenv(EnvProvider) != "" && os.Getenv(EnvProvider) != "local" {
		return nil, fmt.Errorf("%s=%s runs on the local provider only (the peer engines run as local processes)", framework.EnvEnforcer, e)
	}
	switch p := os.Getenv(EnvProvider); p {
	case "", "local":
		if kc := os.Getenv("KUBECONFIG"); kc != "" {
			logf("KUBECONFIG=%s is ignored: the suite starts its own control plane; set %s=kubeconfig to use that cluster", kc, EnvProvider)
		}
		l, err := NewLocal("e2e", logf)
		if err != nil {
			return nil, err
		}
		l.Enforcer = os.Getenv(framework.EnvEnforcer)
		l.ExtraWebhookArgs = strings.Fields(os.Getenv("E2E_WEBHOOK_ARGS"))
		return l, nil
	case "kubeconfig":
		kc := os.Getenv("KUBECONFIG")
		if kc == "" {
			return nil, fmt.Errorf("%s=kubeconfig needs KUBECONFIG to name the cluster's kubeconfig", EnvProvider)
		}
		// go test runs in the package directory: a relative path such as
		// .dev/kubeconfig means the repository root's.
		if !filepath.IsAbs(kc) {
			if _, err := os.Stat(kc); err != nil {
				kc = filepath.Join(root, kc)
			}
		}
		return &Kubeconfig{Path: kc, Logf: logf}, nil
	case "kind":
		return NewKind(root, bin, logf), nil
	default:
		return nil, fmt.Errorf("%s=%q: want local, kubeconfig or kind", EnvProvider, p)
	}
}

// NewLocal is a local control plane of the chosen release
// (framework.ControlPlane) in a new state directory named for purpose
// ("e2e", "soak", "bench", ...), removed at teardown unless $E2E_KEEP_STATE
// is set: what the suite, the soak and the benches each start.
func NewLocal(purpose string, logf framework.Logf) (*Local, error) {
	root, err := framework.RepoRoot()
	if err != nil {
		return nil, err
	}
	bin, version, err := framework.ControlPlane(root)
	if err != nil {
		return nil, err
	}
	state, err := os.MkdirTemp("", "sandbox-fence-"+purpose+"-")
	if err != nil {
		return nil, err
	}
	return &Local{RepoRoot: root, BinDir: bin, KubernetesVersion: version, StateDir: state,
		RemoveState: os.Getenv(EnvKeepState) == "", Logf: logf}, nil
}
