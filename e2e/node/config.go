package node

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// Layout is where a node run keeps its state; everything but the few host
// paths listed in host.go lives under Dir.
type Layout struct{ Dir string }

func (l Layout) ControlPlane() string     { return filepath.Join(l.Dir, "controlplane") }
func (l Layout) Logs() string             { return filepath.Join(l.Dir, "logs") }
func (l Layout) Containerd() string       { return filepath.Join(l.Dir, "containerd") }
func (l Layout) ContainerdConfig() string { return filepath.Join(l.Containerd(), "config.toml") }
func (l Layout) ContainerdSocket() string { return filepath.Join(l.Containerd(), "containerd.sock") }
func (l Layout) CNIConfDir() string       { return filepath.Join(l.Dir, "cni", "net.d") }
func (l Layout) CNIDataDir() string       { return filepath.Join(l.Dir, "cni", "ipam") }
func (l Layout) Kubelet() string          { return filepath.Join(l.Dir, "kubelet") }
func (l Layout) KubeletRoot() string      { return filepath.Join(l.Kubelet(), "root") }
func (l Layout) PodLogs() string          { return filepath.Join(l.Kubelet(), "pod-logs") }
func (l Layout) KubeProxy() string        { return filepath.Join(l.Dir, "kube-proxy") }
func (l Layout) Scheduler() string        { return filepath.Join(l.Dir, "kube-scheduler") }

// PauseImage is the sandbox image reference; hack/node/setup.sh builds it
// from hack/node/pause and it is imported, never pulled.
const PauseImage = "registry.k8s.io/pause:3.10"

// ContainerdConfig renders containerd's configuration: its own root, state,
// socket, runc root and CNI directories, so it shares nothing with a
// system containerd.
func ContainerdConfig(l Layout) string {
	c := l.Containerd()
	return fmt.Sprintf(`# Written by the sandbox-fence node e2e provider (e2e/node).
version = 2
root = %[1]q
state = %[2]q
# These snapshotters need kernel features or tools this host lacks; they
# would only log errors.
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[6]q
  # The VM lacks CAP_SYS_RESOURCE: without this every sandbox fails with
  # "runc create failed ... can't get final child's PID from pipe".
  restrict_oom_score_adj = true
  # Pod network namespaces under our state directory, not /run/netns.
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[7]q
    conf_dir = %[8]q
    max_conf_num = 1

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = %[9]q
        SystemdCgroup = false
`, filepath.Join(c, "root"), filepath.Join(c, "state"), l.ContainerdSocket(),
		filepath.Join(c, "containerd-ttrpc.sock"), filepath.Join(c, "opt"), PauseImage,
		CNIBinDir, l.CNIConfDir(), filepath.Join(c, "runc"))
}

// CNIConfig renders the bridge network: pods on BridgeLink with addresses
// from PodCIDR, reachable from the host. No masquerade: pods only talk to
// this host and each other (the guard chain drops the rest), and without it
// the bridge plugin installs no iptables chains to clean up.
func CNIConfig(l Layout) ([]byte, error) {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       CNINetwork,
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      BridgeLink,
				"isGateway":   true,
				"ipMasq":      false,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  []any{[]any{map[string]any{"subnet": PodCIDR}}},
					"routes":  []any{map[string]any{"dst": "0.0.0.0/0"}},
					"dataDir": l.CNIDataDir(),
				},
			},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// KubeletPorts are the kubelet's listening ports, chosen free at start.
type KubeletPorts struct{ Server, Healthz int }

// KubeletConfig renders the KubeletConfiguration. Every value that differs
// from a kubeadm node says why.
func KubeletConfig(l Layout, caFile string, ports KubeletPorts) string {
	return `# Written by the sandbox-fence node e2e provider (e2e/node).
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# These hosts are cgroup v1 (hybrid): kubelet v1.37 refuses v1 without this.
failCgroupV1: false
cgroupDriver: cgroupfs
# All pod cgroups under one root per hierarchy, which teardown removes.
cgroupRoot: /` + CgroupRoot + `
containerRuntimeEndpoint: unix://` + l.ContainerdSocket() + `
address: ` + AdvertiseIP + `
port: ` + strconv.Itoa(ports.Server) + `
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: ` + strconv.Itoa(ports.Healthz) + `
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: ` + caFile + `
authorization:
  mode: Webhook
# No cluster DNS, and no host resolver either: the host's nameserver is an
# address outside this machine, which pods must never reach. The webhook
# needs no DNS (it reaches the apiserver by the Service IP in its env).
resolvConf: ""
clusterDomain: cluster.local
podLogsDir: ` + l.PodLogs() + `
failSwapOn: false
# Images are imported, never pulled: garbage collection or disk-pressure
# eviction would delete them and pods would fail with ErrImageNeverPull.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 10Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
serializeImagePulls: false
shutdownGracePeriod: 0s
# Secret volumes follow their Secret on each pod sync: a short period lets the
# certificate-rotation test see cert-controller's new Secret in seconds.
syncFrequency: 10s
`
}

// KubeProxyConfig renders kube-proxy's configuration: iptables mode, and no
// host-wide sysctl changes (conntrack sizing, route_localnet), so teardown
// has only iptables chains to remove.
func KubeProxyConfig(kubeconfig string, healthz, metrics int) string {
	return strings.TrimLeft(`
# Written by the sandbox-fence node e2e provider (e2e/node).
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: `+kubeconfig+`
hostnameOverride: `+NodeName+`
mode: iptables
clusterCIDR: `+PodCIDR+`
healthzBindAddress: 127.0.0.1:`+strconv.Itoa(healthz)+`
metricsBindAddress: 127.0.0.1:`+strconv.Itoa(metrics)+`
nodePortAddresses: ["`+AdvertiseIP+`/32"]
iptables:
  localhostNodePorts: false
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, "\n")
}
