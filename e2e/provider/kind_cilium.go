package provider

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	kubectl := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, filepath.Join(k.BinDir, "kubectl"), append([]string{"--kubeconfig", k.kubeconfig}, args...)...)
		return cmd.CombinedOutput()
	}
	if out, err := kubectl("apply", "--server-side", "--force-conflicts", "-f", filepath.Join(crds, "v2"),
		"-f", filepath.Join(crds, "v2alpha1"), "-f", manifest); err != nil {
		return fmt.Errorf("cilium: applying its CRDs and %s: %w\n%s", manifest, err, out)
	}
	if _, err := kubectl("-n", "kube-system", "rollout", "status", "daemonset/cilium", "--timeout=5m"); err != nil {
		// One line: the agent's own first fatal (else error) message names
		// what it lacked, a kernel feature or a BPF program it could not
		// compile.
		logs, _ := kubectl("-n", "kube-system", "logs", "-l", "k8s-app=cilium", "--prefix", "--tail=500", "--previous")
		now, _ := kubectl("-n", "kube-system", "logs", "-l", "k8s-app=cilium", "--prefix", "--tail=500")
		return fmt.Errorf("cilium: the agent did not become ready on every node in 5m: %s", firstAgentFailure(string(logs)+string(now)))
	}
	kc, err := k.kubeClient()
	if err != nil {
		return err
	}
	if err := waitNodesReady(ctx, kc, 3*time.Minute); err != nil {
		return fmt.Errorf("cilium: %w", err)
	}
	k.Logf("kind: Cilium runs on every node (%s)", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// firstAgentFailure is the first level=fatal line of the agents' logs, else
// the first level=error line, else a pointer to the exported logs.
func firstAgentFailure(logs string) string {
	for _, level := range []string{"level=fatal", "level=error"} {
		for _, line := range strings.Split(logs, "\n") {
			if strings.Contains(line, level) {
				return strings.TrimSpace(line)
			}
		}
	}
	return "no error in its log (kind export logs, in $E2E_ARTIFACTS, holds the rest)"
}
