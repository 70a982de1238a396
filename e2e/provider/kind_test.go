package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	kindv1alpha4 "sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
	"sigs.k8s.io/yaml"
)

// fakeKind records the calls the provider makes to kind.
type fakeKind struct {
	calls    []string
	clusters []string
	cgroup1  bool
	loadErr  error
	config   string // the configuration Create was given
}

func (f *fakeKind) Clusters() ([]string, error) { return f.clusters, nil }

func (f *fakeKind) Cgroup2() (bool, error) { return !f.cgroup1, nil }

func (f *fakeKind) Create(name, configPath, kubeconfigPath string, wait time.Duration) error {
	f.calls = append(f.calls, fmt.Sprintf("create %s config=%s kubeconfig=%s wait=%s", name, filepath.Base(configPath), filepath.Base(kubeconfigPath), wait))
	b, err := os.ReadFile(configPath)
	f.config = string(b)
	return err
}

func (f *fakeKind) Nodes(string) ([]nodes.Node, error) { return nil, nil }

func (f *fakeKind) LoadImageArchive(name, archivePath string) error {
	f.calls = append(f.calls, "load "+name+" "+filepath.Base(archivePath))
	return f.loadErr
}

func (f *fakeKind) Delete(name, kubeconfigPath string) error {
	if kubeconfigPath != "" {
		kubeconfigPath = filepath.Base(kubeconfigPath)
	}
	f.calls = append(f.calls, "delete "+name+" kubeconfig="+kubeconfigPath)
	return nil
}

func (f *fakeKind) CollectLogs(name, dir string) error {
	f.calls = append(f.calls, "logs "+name+" "+dir)
	return nil
}

func discard(string, ...any) {}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func TestShippedKindConfigIsAControlPlaneAndTwoWorkersOnV137(t *testing.T) {
	c, err := LoadKindConfig(filepath.Join(repoRoot(t), "kind.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var roles, images []string
	for _, n := range c.Nodes {
		roles = append(roles, string(n.Role))
		images = append(images, strings.SplitN(n.Image, "@sha256:", 2)[0])
	}
	if d := cmp.Diff([]string{"control-plane", "worker", "worker"}, roles); d != "" {
		t.Errorf("node roles (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"kindest/node:v1.37.0", "kindest/node:v1.37.0", "kindest/node:v1.37.0"}, images); d != "" {
		t.Errorf("node images, without digest (-want +got):\n%s", d)
	}
	for _, n := range c.Nodes {
		if !strings.Contains(n.Image, "@sha256:") {
			t.Errorf("node image %q is not pinned by digest", n.Image)
		}
	}
}

func TestKindConfigWithAnUnknownFieldIsRefused(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kind.yaml")
	if err := os.WriteFile(p, []byte("kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnodes:\n- role: control-plane\n  imagee: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadKindConfig(p)
	if err == nil || !strings.Contains(err.Error(), "imagee") {
		t.Fatalf("want an error naming the unknown field imagee, got %v", err)
	}
}

func TestKindProviderRefusesToStartWithoutTheImageArchive(t *testing.T) {
	f := &fakeKind{}
	k := &Kind{RepoRoot: repoRoot(t), ClusterName: "sf", ConfigPath: filepath.Join(repoRoot(t), "kind.yaml"), Logf: discard, api: f}
	_, err := k.Setup(context.Background())
	if err == nil || !strings.Contains(err.Error(), EnvImageArchive) {
		t.Fatalf("want an error naming %s, got %v", EnvImageArchive, err)
	}
	if len(f.calls) != 0 {
		t.Errorf("kind was called before the inputs were valid: %v", f.calls)
	}
}

// kindUpToLoad runs Setup against f until kind load fails (there is no
// container engine in unit tests), so that every call before it is recorded.
func kindUpToLoad(t *testing.T, f *fakeKind) *Kind {
	t.Helper()
	archive := filepath.Join(t.TempDir(), "webhook-image.tar")
	if err := os.WriteFile(archive, []byte("not really an image"), 0o644); err != nil {
		t.Fatal(err)
	}
	stop := errors.New("no container engine in unit tests")
	f.loadErr = stop
	k := &Kind{RepoRoot: repoRoot(t), ClusterName: "sf-unit", ConfigPath: filepath.Join(repoRoot(t), "kind.yaml"), ImageArchive: archive, Logf: discard, api: f}
	_, err := k.Setup(context.Background())
	if !errors.Is(err, stop) {
		t.Fatalf("Setup: want the load error, got %v", err)
	}
	if !strings.HasPrefix(err.Error(), "e2e-kind: load: ") {
		t.Errorf("Setup error %q does not name the phase: want it to start with \"e2e-kind: load: \"", err)
	}
	return k
}

func TestKindProviderCreatesLoadsAndDeletesTheNamedCluster(t *testing.T) {
	f := &fakeKind{}
	k := kindUpToLoad(t, f)
	if err := k.Teardown(context.Background(), true, "/tmp/artifacts"); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"create sf-unit config=kind.yaml kubeconfig=kubeconfig wait=3m0s",
		"load sf-unit webhook-image.tar",
		"logs sf-unit /tmp/artifacts/kind-logs",
		"delete sf-unit kubeconfig=kubeconfig",
	}
	if d := cmp.Diff(want, f.calls); d != "" {
		t.Errorf("kind calls (-want +got):\n%s", d)
	}
}

func TestALeftoverClusterOfTheSameNameIsDeletedFirst(t *testing.T) {
	f := &fakeKind{clusters: []string{"other", "sf-unit"}}
	k := kindUpToLoad(t, f)
	_ = k.Teardown(context.Background(), false, "")
	want := []string{
		"delete sf-unit kubeconfig=",
		"create sf-unit config=kind.yaml kubeconfig=kubeconfig wait=3m0s",
		"load sf-unit webhook-image.tar",
		"delete sf-unit kubeconfig=kubeconfig",
	}
	if d := cmp.Diff(want, f.calls); d != "" {
		t.Errorf("kind calls (-want +got):\n%s", d)
	}
}

// What the cluster is created from: kind.yaml as users run it on a cgroup
// v2 host, with only the host's needs added otherwise.
func TestClusterConfigAddsOnlyWhatTheHostNeeds(t *testing.T) {
	base, err := LoadKindConfig(filepath.Join(repoRoot(t), "kind.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	type shape struct {
		Images     []string
		NoCNI      bool
		Patches    []string
		NodesCount int
	}
	summarize := func(c *kindv1alpha4.Cluster) shape {
		s := shape{NoCNI: c.Networking.DisableDefaultCNI, Patches: c.KubeadmConfigPatches, NodesCount: len(c.Nodes)}
		for _, n := range c.Nodes {
			s.Images = append(s.Images, strings.SplitN(n.Image, "@", 2)[0])
		}
		return s
	}
	kindest := []string{"kindest/node:v1.37.0", "kindest/node:v1.37.0", "kindest/node:v1.37.0"}
	offline := []string{"sf/node:x", "sf/node:x", "sf/node:x"}
	tests := []struct {
		name      string
		cgroup2   bool
		nodeImage string
		cni       string
		want      shape
	}{
		{name: "a cgroup v2 host with a registry gets kind.yaml unchanged", cgroup2: true,
			want: shape{Images: kindest, NodesCount: 3}},
		{name: "a cgroup v1 host gets failCgroupV1 false for its kubelets",
			want: shape{Images: kindest, NodesCount: 3, Patches: []string{failCgroupV1Patch}}},
		{name: "an offline node image runs on every node with kind's CNI off", cgroup2: true, nodeImage: "sf/node:x",
			want: shape{Images: offline, NoCNI: true, NodesCount: 3}},
		{name: "Cilium as the CNI turns kind's CNI off on kind.yaml's nodes", cgroup2: true, cni: CNICilium,
			want: shape{Images: kindest, NoCNI: true, NodesCount: 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := summarize(ClusterConfig(base, tc.cgroup2, tc.nodeImage, tc.cni))
			if d := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("cluster config (-want +got):\n%s", d)
			}
		})
	}
	if d := cmp.Diff(summarize(base), shape{Images: kindest, NodesCount: 3}, cmpopts.EquateEmpty()); d != "" {
		t.Errorf("ClusterConfig changed its input (-want +got):\n%s", d)
	}
}

func TestTheKubeletPatchIsAValidKubeletConfiguration(t *testing.T) {
	var got map[string]any
	if err := yaml.UnmarshalStrict([]byte(failCgroupV1Patch), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"kind": "KubeletConfiguration", "apiVersion": "kubelet.config.k8s.io/v1beta1", "failCgroupV1": false}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("kubelet patch (-want +got):\n%s", d)
	}
}

func TestEveryNodeRoutesTheOtherNodesPodRanges(t *testing.T) {
	all := []nodeNet{
		{Name: "cp", IP: "198.18.0.2", PodCIDR: "10.244.0.0/24"},
		{Name: "w1", IP: "198.18.0.3", PodCIDR: "10.244.1.0/24"},
		{Name: "w2", IP: "198.18.0.4", PodCIDR: "10.244.2.0/24"},
	}
	want := [][]string{
		{"ip", "route", "replace", "10.244.0.0/24", "via", "198.18.0.2"},
		{"ip", "route", "replace", "10.244.2.0/24", "via", "198.18.0.4"},
	}
	if d := cmp.Diff(want, Routes("w1", all)); d != "" {
		t.Errorf("routes of w1 (-want +got):\n%s", d)
	}
}

func TestCNIConfigurationGivesPodsTheNodesRange(t *testing.T) {
	b, err := CNIConfList("10.244.1.0/24")
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Plugins []struct {
			Type   string `json:"type"`
			IPMasq bool   `json:"ipMasq"`
			IPAM   struct {
				Ranges [][]struct {
					Subnet string `json:"subnet"`
				} `json:"ranges"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(b, &conf); err != nil {
		t.Fatal(err)
	}
	if len(conf.Plugins) == 0 || conf.Plugins[0].Type != "bridge" || conf.Plugins[0].IPMasq ||
		len(conf.Plugins[0].IPAM.Ranges) != 1 || conf.Plugins[0].IPAM.Ranges[0][0].Subnet != "10.244.1.0/24" {
		t.Errorf("conflist: want a bridge without masquerade, addresses from 10.244.1.0/24; got %s", b)
	}
	if _, err := CNIConfList("not-a-cidr"); err == nil {
		t.Error("CNIConfList accepted a malformed CIDR")
	}
}

func TestProviderIsChosenExplicitly(t *testing.T) {
	tests := []struct {
		name       string
		provider   string
		kubeconfig string
		want       string
		wantErr    string
	}{
		{name: "no setting starts a local control plane", want: "local"},
		{name: "a KUBECONFIG alone does not redirect the suite to that cluster", kubeconfig: "/somewhere/config", want: "local"},
		{name: "kubeconfig with KUBECONFIG uses that cluster", provider: "kubeconfig", kubeconfig: "/somewhere/config", want: "kubeconfig"},
		{name: "kubeconfig without KUBECONFIG is refused", provider: "kubeconfig", wantErr: "needs KUBECONFIG"},
		{name: "kind is kind", provider: "kind", want: "kind"},
		{name: "an unknown provider is refused", provider: "minikube", wantErr: `E2E_PROVIDER="minikube": want local`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvProvider, tc.provider)
			t.Setenv("KUBECONFIG", tc.kubeconfig)
			t.Chdir(repoRoot(t))
			p, err := FromEnv(discard)
			got, gotErr := "", ""
			if err != nil {
				gotErr = err.Error()
			} else {
				got = p.Name()
				if l, ok := p.(*Local); ok {
					_ = os.RemoveAll(l.StateDir)
				}
			}
			if tc.wantErr != "" {
				if !strings.Contains(gotErr, tc.wantErr) {
					t.Fatalf("error %q, want it to contain %q", gotErr, tc.wantErr)
				}
				return
			}
			if gotErr != "" || got != tc.want {
				t.Fatalf("provider %q (error %q), want %q", got, gotErr, tc.want)
			}
		})
	}
}

// The agent's fatal line (here from an image without ipset) is the one line
// make e2e-cilium reports when Cilium does not start.
func TestFirstAgentFailureNamesWhatTheAgentLacked(t *testing.T) {
	logs := `[pod/cilium-vvtcw/cilium-agent] time=2026-12-06T21:18:28Z level=warn msg="Failed to probe kernel support for BIG TCP"
[pod/cilium-vvtcw/cilium-agent] time=2026-12-06T21:18:28Z level=error msg="Start hook failed" error="error while creating ipset cilium_node_set_v4"
[pod/cilium-vvtcw/cilium-agent] time=2026-12-06T21:18:30Z level=fatal msg="unable to run agent: failed to start: error while creating ipset cilium_node_set_v4" subsys=daemon`
	want := `[pod/cilium-vvtcw/cilium-agent] time=2026-12-06T21:18:30Z level=fatal msg="unable to run agent: failed to start: error while creating ipset cilium_node_set_v4" subsys=daemon`
	if got := firstAgentFailure(logs); got != want {
		t.Errorf("firstAgentFailure = %q, want %q", got, want)
	}
}
