package provider

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/sandbox-fence/sandbox-fence/internal/testing/upstream"
)

// EnvKindCNI set to "cilium" makes Cilium the cluster's CNI (make
// e2e-cilium): the image and manifest hack/kind/cilium.sh builds from the Go
// module, in place of kind's own CNI or the provider's bridge.
const EnvKindCNI = "KIND_CNI"

// CNICilium is the one value EnvKindCNI takes.
const CNICilium = "cilium"

// installCilium loads the agent's image into every node (when built here),
// applies Cilium's CRDs (the operator's job; the chart runs no operator)
// and the rendered chart, and waits until the agent runs on every node and
// every node is Ready.
func (k *Kind) installCilium(ctx context.Context) error {
	start := time.Now()
	archive := filepath.Join(k.BinDir, "cilium-image.tar")
	manifest := filepath.Join(k.BinDir, "cilium.yaml")
	if _, err := os.Stat(manifest); err != nil {
		return fmt.Errorf("cilium: %w (hack/kind/cilium.sh renders it; make e2e-cilium runs it)", err)
	}
	// No archive: hack/kind/cilium.sh rendered the chart for CILIUM_IMAGE,
	// which the nodes pull.
	if _, err := os.Stat(archive); err == nil {
		if err := k.api.LoadImageArchive(k.ClusterName, archive); err != nil {
			return fmt.Errorf("cilium: loading %s: %w", archive, err)
		}
	}
	cnpCRD, _, err := upstream.CiliumCRD(ctx, k.RepoRoot)
	if err != nil {
		return fmt.Errorf("cilium: %w", err)
	}
	crds := filepath.Dir(filepath.Dir(cnpCRD))
	for _, args := range [][]string{
		{"apply", "--server-side", "--force-conflicts", "-f", filepath.Join(crds, "v2"), "-f", filepath.Join(crds, "v2alpha1"), "-f", manifest},
		{"-n", "kube-system", "rollout", "status", "daemonset/cilium", "--timeout=5m"},
		{"wait", "--for=condition=Ready", "node", "--all", "--timeout=3m"},
	} {
		cmd := exec.CommandContext(ctx, filepath.Join(k.BinDir, "kubectl"), append([]string{"--kubeconfig", k.kubeconfig}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("cilium: kubectl %v: %w\n%s", args, err, out)
		}
	}
	k.Logf("kind: Cilium runs on every node (%s)", time.Since(start).Round(100*time.Millisecond))
	return nil
}
