package v1alpha1

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func fullConfig() *FenceConfig {
	return &FenceConfig{
		ObjectMeta: metav1.ObjectMeta{Name: DefaultConfigName, Labels: map[string]string{"a": "b"}},
		Spec: FenceConfigSpec{
			Hosts:              []Host{{Username: "system:serviceaccount:sbx:host", Namespaces: []string{"sbx", "sbx-2"}}},
			PerSandboxLabelKey: "example.com/egress",
			BreakGlass:         BreakGlass{Users: []string{"alice"}, Groups: []string{"oncall"}},
			StrictDelete:       true,
			UniqueOwnerLabel:   true,
		},
	}
}

// The deep copy is generated (controller-gen); a copy that shared a slice or
// map with the original would let the webhook's cache be changed through a
// handler's copy.
func TestDeepCopySharesNothing(t *testing.T) {
	orig := fullConfig()
	cp := orig.DeepCopy()
	if diff := cmp.Diff(orig, cp); diff != "" {
		t.Fatalf("copy differs (-orig +copy):\n%s", diff)
	}
	cp.Labels["a"] = "changed"
	cp.Spec.Hosts[0].Username = "changed"
	cp.Spec.Hosts[0].Namespaces[0] = "changed"
	cp.Spec.BreakGlass.Users[0] = "changed"
	cp.Spec.BreakGlass.Groups[0] = "changed"
	if diff := cmp.Diff(fullConfig(), orig); diff != "" {
		t.Errorf("changing the copy changed the original (-want +got):\n%s", diff)
	}

	list := &FenceConfigList{Items: []FenceConfig{*fullConfig()}}
	lcp := list.DeepCopyObject().(*FenceConfigList)
	lcp.Items[0].Spec.Hosts[0].Namespaces[0] = "changed"
	if got := list.Items[0].Spec.Hosts[0].Namespaces[0]; got != "sbx" {
		t.Errorf("changing the list copy changed the original: %q", got)
	}
}
