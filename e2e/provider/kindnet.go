package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

// The pod network of an offline cluster. kind's own CNI, kindnetd, is an
// image from a registry; without one the provider does what kindnetd does
// with the reference CNI plugins the node image carries (Debian's
// containernetworking-plugins): each node's pods on a bridge with
// addresses from the node's spec.podCIDR (allocated by the controller
// manager), and on every node a route to every other node's pod range via
// that node's address. All nodes share one container network, so no
// encapsulation is needed, and nothing is masqueraded: pods reach other
// pods, nodes and (through kube-proxy) Services, and nothing else.

// cniConfPath is where containerd in the node looks for CNI configuration.
const cniConfPath = "/etc/cni/net.d/10-sandbox-fence.conflist"

// CNIConfList is the CNI configuration of a node whose pods take addresses
// from podCIDR.
func CNIConfList(podCIDR string) ([]byte, error) {
	if _, _, err := net.ParseCIDR(podCIDR); err != nil {
		return nil, fmt.Errorf("pod CIDR %q: %w", podCIDR, err)
	}
	conf := map[string]any{
		"cniVersion": "0.4.0",
		"name":       "sandbox-fence",
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
				// A pod reaching a Service that sends it back to itself.
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":   "host-local",
					"ranges": []any{[]any{map[string]any{"subnet": podCIDR}}},
					"routes": []any{map[string]any{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]any{"portMappings": true}},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// nodeNet is what the pod network needs to know of a node.
type nodeNet struct {
	Name, IP, PodCIDR string
}

// Routes lists, for one node, the `ip route replace` arguments that send
// every other node's pod range to that node.
func Routes(self string, all []nodeNet) [][]string {
	var out [][]string
	for _, n := range all {
		if n.Name != self {
			out = append(out, []string{"ip", "route", "replace", n.PodCIDR, "via", n.IP})
		}
	}
	return out
}

// podNetwork writes the CNI configuration into every node, sets the routes
// between them and waits until every node is Ready. Re-running it after a
// node restarted (with a new address, maybe) puts everything right again.
func (k *Kind) podNetwork(ctx context.Context) error {
	start := time.Now()
	kc, err := k.kubeClient()
	if err != nil {
		return err
	}
	containers, err := k.api.Nodes(k.ClusterName)
	if err != nil {
		return err
	}
	var all []nodeNet
	err = pollNodes(ctx, kc, 2*time.Minute, "every node has a pod CIDR and an address", func(items []corev1.Node) (bool, string) {
		all = all[:0]
		for _, n := range items {
			nn := nodeNet{Name: n.Name, PodCIDR: n.Spec.PodCIDR}
			for _, a := range n.Status.Addresses {
				if a.Type == corev1.NodeInternalIP && net.ParseIP(a.Address).To4() != nil {
					nn.IP = a.Address
				}
			}
			if nn.PodCIDR == "" || nn.IP == "" {
				return false, fmt.Sprintf("node %s: podCIDR %q address %q", n.Name, nn.PodCIDR, nn.IP)
			}
			all = append(all, nn)
		}
		if len(all) != len(containers) {
			return false, fmt.Sprintf("%d of %d nodes registered", len(all), len(containers))
		}
		return true, ""
	})
	if err != nil {
		return err
	}
	for _, c := range containers {
		self := c.String()
		var me *nodeNet
		for i := range all {
			if all[i].Name == self {
				me = &all[i]
			}
		}
		if me == nil {
			return fmt.Errorf("node container %s is not a registered node", self)
		}
		// The address the node has now: after a restart the registered one
		// may lag behind until the kubelet updates its status.
		if ip, _, err := c.IP(); err == nil && ip != "" {
			me.IP = ip
		}
	}
	for _, c := range containers {
		self := c.String()
		for _, n := range all {
			if n.Name != self {
				continue
			}
			conf, err := CNIConfList(n.PodCIDR)
			if err != nil {
				return err
			}
			if err := nodeutils.WriteFile(c, cniConfPath, string(conf)); err != nil {
				return fmt.Errorf("node %s: writing %s: %w", self, cniConfPath, err)
			}
		}
		for _, r := range Routes(self, all) {
			var stderr bytes.Buffer
			if err := c.Command(r[0], r[1:]...).SetStderr(&stderr).Run(); err != nil {
				return fmt.Errorf("node %s: %s: %w: %s", self, strings.Join(r, " "), err, stderr.String())
			}
		}
	}
	if err := waitNodesReady(ctx, kc, 3*time.Minute); err != nil {
		return err
	}
	k.Logf("kind: pod network on %d nodes (bridge + host-local, routes between nodes) ready in %s", len(all), time.Since(start).Round(100*time.Millisecond))
	return nil
}

// pollNodes waits until cond holds for the cluster's nodes.
func pollNodes(ctx context.Context, kc kubernetes.Interface, timeout time.Duration, what string, cond func([]corev1.Node) (bool, string)) error {
	return framework.Eventually(ctx, timeout, 500*time.Millisecond, what, func(ctx context.Context) (bool, string, error) {
		list, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		ok, why := cond(list.Items)
		return ok, why, nil
	})
}

// waitNodesReady waits until every node's kubelet reports Ready.
func waitNodesReady(ctx context.Context, kc kubernetes.Interface, timeout time.Duration) error {
	return pollNodes(ctx, kc, timeout, "every node Ready", func(items []corev1.Node) (bool, string) {
		if len(items) == 0 {
			return false, "no nodes"
		}
		for _, n := range items {
			ready := false
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready = true
				}
			}
			if !ready {
				return false, "node " + n.Name + " not Ready"
			}
		}
		return true, ""
	})
}

// kubeClient is the admin's client of the cluster, from kind's kubeconfig.
func (k *Kind) kubeClient() (kubernetes.Interface, error) {
	cfg, err := contextConfig(k.kubeconfig, "")
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}
