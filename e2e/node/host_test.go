package node

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

func TestSplitRuleKeepsQuotedCommentsWhole(t *testing.T) {
	tests := []struct {
		name string
		rule string
		want []string
	}{
		{
			name: "a jump without options splits on spaces",
			rule: "FORWARD -j SANDBOX-FENCE-NODE",
			want: []string{"FORWARD", "-j", "SANDBOX-FENCE-NODE"},
		},
		{
			name: "a quoted comment with spaces stays one argument, without quotes",
			rule: `SANDBOX-FENCE-NODE -i sf-cni0 -m comment --comment "pods reach only this host" -j DROP`,
			want: []string{"SANDBOX-FENCE-NODE", "-i", "sf-cni0", "-m", "comment", "--comment", "pods reach only this host", "-j", "DROP"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, splitRule(tc.rule)); diff != "" {
				t.Errorf("splitRule(%q) (-want +got):\n%s", tc.rule, diff)
			}
		})
	}
}

func TestUnescapeMountDecodesOctalEscapes(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{name: "a plain path is unchanged", in: "/work/main/.dev/node/containerd/state", want: "/work/main/.dev/node/containerd/state"},
		{name: "a space is decoded", in: `/a\040b`, want: "/a b"},
		{name: "a backslash not starting an escape is kept", in: `/a\b`, want: `/a\b`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := unescapeMount(tc.in); got != tc.want {
				t.Errorf("unescapeMount(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// The rendered configurations are what the measured node needs; a typo here
// surfaces as a pod that never starts, far from its cause.
func TestRenderedConfigurationsCarryTheMeasuredSettings(t *testing.T) {
	l := Layout{Dir: "/state"}

	var cni struct {
		Name    string           `json:"name"`
		Plugins []map[string]any `json:"plugins"`
	}
	raw, err := CNIConfig(l)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &cni); err != nil {
		t.Fatal(err)
	}
	gotCNI := map[string]any{"name": cni.Name, "bridge": cni.Plugins[0]["bridge"], "ipMasq": cni.Plugins[0]["ipMasq"],
		"dataDir": cni.Plugins[0]["ipam"].(map[string]any)["dataDir"]}
	wantCNI := map[string]any{"name": CNINetwork, "bridge": BridgeLink, "ipMasq": false, "dataDir": "/state/cni/ipam"}
	if diff := cmp.Diff(wantCNI, gotCNI); diff != "" {
		t.Errorf("CNI config (-want +got):\n%s", diff)
	}

	var kubelet map[string]any
	if err := yaml.UnmarshalStrict([]byte(KubeletConfig(l, "/state/ca.crt", KubeletPorts{Server: 1, Healthz: 2})), &kubelet); err != nil {
		t.Fatal(err)
	}
	gotKubelet := map[string]any{}
	for _, k := range []string{"failCgroupV1", "cgroupDriver", "cgroupRoot", "containerRuntimeEndpoint", "address", "imageGCHighThresholdPercent"} {
		gotKubelet[k] = kubelet[k]
	}
	wantKubelet := map[string]any{
		"failCgroupV1": false, "cgroupDriver": "cgroupfs", "cgroupRoot": "/" + CgroupRoot,
		"containerRuntimeEndpoint": "unix:///state/containerd/containerd.sock", "address": AdvertiseIP,
		"imageGCHighThresholdPercent": float64(100),
	}
	if diff := cmp.Diff(wantKubelet, gotKubelet); diff != "" {
		t.Errorf("kubelet config (-want +got):\n%s", diff)
	}

	cd := ContainerdConfig(l)
	for _, want := range []string{
		"restrict_oom_score_adj = true",
		"netns_mounts_under_state_dir = true",
		`address = "/state/containerd/containerd.sock"`,
		`conf_dir = "/state/cni/net.d"`,
		`sandbox_image = "` + PauseImage + `"`,
	} {
		if !strings.Contains(cd, want) {
			t.Errorf("containerd config lacks %q:\n%s", want, cd)
		}
	}
}
