package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/discovery"

	"github.com/sandbox-fence/sandbox-fence/internal/kubeversion"
)

// EnvKubernetesVersion chooses the Kubernetes release of the local control
// plane: empty, or the pinned release, means bin/; any other means
// bin/k8s/<version>/, which `make tools KUBERNETES_VERSION=<version>` builds
// (hack/tools/build.sh).
const EnvKubernetesVersion = "KUBERNETES_VERSION"

// PinnedKubernetes is the release hack/tools/kubernetes/go.mod requires.
func PinnedKubernetes(repoRoot string) (string, error) {
	path := filepath.Join(repoRoot, "hack", "tools", "kubernetes", "go.mod")
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	for l := range strings.Lines(string(b)) {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(l), "require "))
		if len(f) >= 2 && f[0] == "k8s.io/kubernetes" && strings.HasPrefix(f[1], "v") {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("%s requires no k8s.io/kubernetes", path)
}

// ControlPlane names the binaries of the local control plane: the directory
// holding etcd, kube-apiserver, kube-controller-manager and kubectl, and the
// release they are.
func ControlPlane(repoRoot string) (binDir, version string, err error) {
	pinned, err := PinnedKubernetes(repoRoot)
	if err != nil {
		return "", "", err
	}
	v := os.Getenv(EnvKubernetesVersion)
	if v == "" || v == pinned {
		return filepath.Join(repoRoot, "bin"), pinned, nil
	}
	dir := filepath.Join(repoRoot, "bin", "k8s", v)
	if _, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err != nil {
		return "", "", fmt.Errorf("%s=%s: no control plane in %s: run `make tools %s=%s` first", EnvKubernetesVersion, v, dir, EnvKubernetesVersion, v)
	}
	return dir, v, nil
}

// Kubectl is the kubectl of the chosen control plane, which renders the
// kustomizations as that release's users would.
func Kubectl(repoRoot string) (string, error) {
	dir, _, err := ControlPlane(repoRoot)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "kubectl"), nil
}

// CheckServerVersion is the install step's first check: a cluster older
// than the oldest supported release (kubeversion.Minimum) is refused with a
// message saying so, before anything is installed; want, when set, is the
// release the provider started and the server must report.
func (e *Env) CheckServerVersion(ctx context.Context, want string, logf Logf) error {
	dc, err := discovery.NewDiscoveryClientForConfig(e.Admin.Config)
	if err != nil {
		return err
	}
	info, err := dc.ServerVersionWithContext(ctx)
	if err != nil {
		return fmt.Errorf("read the server's version: %w", err)
	}
	if err := kubeversion.Check(info.GitVersion); err != nil {
		return fmt.Errorf("not installing sandbox-fence: %w", err)
	}
	if want != "" && info.GitVersion != want {
		return fmt.Errorf("the server reports Kubernetes %s, want %s", info.GitVersion, want)
	}
	logf("cluster: Kubernetes %s (supported: %s or later)", info.GitVersion, kubeversion.Minimum)
	return nil
}
