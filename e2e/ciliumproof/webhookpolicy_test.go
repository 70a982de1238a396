//go:build cilium

package ciliumproof

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/cilium/pkg/labels"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
)

const (
	webhookPolicyFile = "../../config/components/network-policy/ciliumnetworkpolicy.yaml"
	webhookDeployment = "../../config/webhook/base/deployment.yaml"
)

// Peer is a synthetic identity, as the agent's selector cache holds one: a
// name for messages and the identity's labels.
type Peer struct {
	Name   string
	Labels labels.LabelArray
}

func decodeFile(t *testing.T, path string, into any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// The optional network-policy component, read by Cilium's own parser and
// matched with its own selectors against synthetic identities, selects the
// webhook's pods and admits to them only the API server on the admission
// port, the cluster on the metrics port and the host on the health port:
// the ports the shipped Deployment declares under those names
// (docs/webhook.md, Network policy). A port renamed or moved in the
// Deployment, an entity widened (world, all), a selector that misses the
// pods, or a rule added fails here.
func TestTheWebhookNetworkPolicyAdmitsOnlyTheAPIServerToTheAdmissionPort(t *testing.T) {
	var dep appsv1.Deployment
	decodeFile(t, webhookDeployment, &dep)
	ports := map[string]int32{}
	for _, c := range dep.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
	}
	var body map[string]any
	decodeFile(t, webhookPolicyFile, &body)
	parsed, err := Parse(body)
	if err != nil {
		t.Fatalf("Cilium's parser refuses %s: %v", webhookPolicyFile, err)
	}

	webhookPod := []string{"k8s:" + podNamespaceLabel + "=" + dep.Namespace, "k8s:" + clusterLabel + "=" + ClusterName}
	for k, v := range dep.Spec.Template.Labels {
		webhookPod = append(webhookPod, "k8s:"+k+"="+v)
	}
	peers := []Peer{
		{"the API server", labels.ParseLabelArray("reserved:kube-apiserver")},
		{"the host", labels.ParseLabelArray("reserved:host")},
		{"another node", labels.ParseLabelArray("reserved:remote-node")},
		{"a pod of the cluster", labels.ParseLabelArray("k8s:"+podNamespaceLabel+"=default", "k8s:app=client", "k8s:"+clusterLabel+"="+ClusterName)},
		{"the world", labels.ParseLabelArray("reserved:world")},
	}
	// Who reaches which port of the webhook's pods, as "port <- peer".
	var got []string
	for _, e := range parsed.Entries {
		if !e.Ingress || !e.IsAllow() {
			t.Errorf("entry %+v: want ingress allow entries only", e)
			continue
		}
		if e.Subject == nil || !e.Subject.Matches(labels.ParseLabelArray(webhookPod...)) {
			t.Errorf("the subject %v does not select the webhook's pods (%v)", e.Subject, webhookPod)
			continue
		}
		for _, peer := range peers {
			if !e.L3.Matches(peer.Labels) {
				continue
			}
			for _, pr := range e.L4 {
				for _, p := range pr.Ports {
					got = append(got, fmt.Sprintf("%s/%s <- %s", p.Port, p.Protocol, peer.Name))
				}
			}
		}
	}
	slices.Sort(got)
	want := []string{
		fmt.Sprintf("%d/TCP <- the API server", ports["webhook"]),
		fmt.Sprintf("%d/TCP <- the host", ports["health"]),
	}
	for _, peer := range peers[:4] { // the cluster entity: all but the world
		want = append(want, fmt.Sprintf("%d/TCP <- %s", ports["metrics"], peer.Name))
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the policy admits\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}
