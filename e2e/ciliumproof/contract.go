package ciliumproof

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"

	"github.com/cilium/cilium/pkg/labels"
	"github.com/cilium/cilium/pkg/policy/api"
	"github.com/cilium/cilium/pkg/policy/types"
)

// Subject is the sandbox a per-sandbox policy is for: its namespace, the
// configured label key and the owner name, the label's value (contract §4.1).
type Subject struct {
	Namespace string
	LabelKey  string
	Owner     string
}

const (
	podNamespaceLabel = "io.kubernetes.pod.namespace"
	clusterLabel      = "io.cilium.k8s.policy.cluster"
)

// Peer is a synthetic identity, as the agent's selector cache holds one: a
// name for messages and the identity's labels.
type Peer struct {
	Name   string
	Labels labels.LabelArray
}

// KubeDNS is the identity of a kube-dns pod of the local cluster.
var KubeDNS = Peer{"kube-dns", labels.ParseLabelArray(
	"k8s:"+podNamespaceLabel+"=kube-system", "k8s:k8s-app=kube-dns",
	"k8s:"+clusterLabel+"="+ClusterName, "k8s:io.cilium.k8s.policy.serviceaccount=coredns")}

// Finding is one way a parsed body leaves the contract.
type Finding struct {
	// Where is the rule or entry, e.g. "egress entry 1".
	Where  string
	Detail string
}

func (f Finding) String() string { return f.Where + ": " + f.Detail }

// Check lists every way the parsed body lets more than contract §4.3 and
// §4.6 say, as Cilium's policy repository would read it:
//
//   - each rule selects exactly the sandbox's pods (checked on the rule's
//     selector and with Cilium's own matcher on synthetic pods), egress is
//     default-deny, and there is no ingress, ingressDeny, egressDeny or node
//     selector;
//   - each policy entry is an egress allow whose peers are either only the
//     kube-dns selector, on port 53 alone, or only FQDN selectors (any port,
//     DNS or no L7 rules, server names, no listener or TLS);
//   - no synthetic peer other than kube-dns and the FQDN identities of the
//     body's own selectors is matched by any entry (Cilium's matcher);
//   - each FQDN selector reaches, on sampled names, only what the grammar
//     entry it stands for allows, and exactly what contract §4.6 says.
//
// An empty result means the body is within the contract.
func Check(p *Parsed, s Subject, rng *rand.Rand) []Finding {
	var out []Finding
	add := func(where, format string, args ...any) {
		out = append(out, Finding{Where: where, Detail: fmt.Sprintf(format, args...)})
	}
	if len(p.Rules) == 0 {
		add("policy", "Cilium read no rule")
	}
	for i, r := range p.Rules {
		where := fmt.Sprintf("rule %d", i)
		if n := len(r.Ingress) + len(r.IngressDeny) + len(r.EgressDeny); n > 0 {
			add(where, "has %d ingress, ingressDeny or egressDeny rules", n)
		}
		if r.NodeSelector.LabelSelector != nil {
			add(where, "has a node selector")
		}
		if r.EnableDefaultDeny.Egress == nil || !*r.EnableDefaultDeny.Egress {
			add(where, "egress is not default-deny: the sandbox would keep every egress no other policy denies")
		}
		if d := endpointSelectorDiff(r.EndpointSelector, s); d != "" {
			add(where, "endpointSelector %s: %s", r.EndpointSelector.LabelSelectorString(), d)
		}
		for j, eg := range r.Egress {
			for k, es := range eg.ToEndpoints {
				if !kubeDNSSelector(es) {
					add(fmt.Sprintf("%s egress %d toEndpoints %d", where, j, k), "%s is not exactly kube-dns of the local cluster", es.LabelSelectorString())
				}
			}
		}
	}
	others := otherPeers(s)
	for i, e := range p.Entries {
		where := fmt.Sprintf("entry %d", i)
		if e.Ingress || e.Node || e.Verdict != types.Allow || !e.DefaultDeny || e.Tier != types.Normal || e.Priority != 0 {
			add(where, "is not a default-deny egress allow of the normal tier (ingress %v, node %v, verdict %v, default deny %v, tier %v, priority %v)",
				e.Ingress, e.Node, e.Verdict, e.DefaultDeny, e.Tier, e.Priority)
		}
		if e.Authentication != nil {
			add(where, "asks for authentication %+v", *e.Authentication)
		}
		for _, d := range subjectDiffs(e.Subject, s) {
			add(where, "subject %s %s", e.Subject, d)
		}
		for _, peer := range others {
			if e.L3.Matches(peer.Labels) || (e.L3 != nil && len(e.L3) == 0 && len(e.L4) > 0) {
				add(where, "lets the sandbox reach %s (%v)", peer.Name, peer.Labels)
			}
		}
		switch {
		case e.L3 == nil:
			// Selects no peer: allows nothing.
		case len(e.L3) == 0:
			if len(e.L4) > 0 {
				add(where, "has ports but no peer: Cilium reads that as every peer")
			}
		case allFQDN(e.L3):
			for j, pr := range e.L4 {
				if d := fqdnPortRuleDiff(pr); d != "" {
					add(fmt.Sprintf("%s port rule %d", where, j), "%s", d)
				}
			}
			for _, sel := range e.L3 {
				f, _ := sel.GetFQDNSelector()
				if _, ok := ContractReach(*f); !ok {
					add(where, "FQDN selector %s is no form contract §4.6 describes", f.String())
				}
				problems, _ := CheckReach(*f, rng)
				for _, pr := range problems {
					add(where, "%s", pr)
				}
			}
		case allKubeDNS(e.L3):
			if len(e.L4) == 0 {
				add(where, "kube-dns on every port: the kube-dns rule must name port 53")
			}
			for j, pr := range e.L4 {
				if d := dnsPortRuleDiff(pr); d != "" {
					add(fmt.Sprintf("%s port rule %d", where, j), "%s", d)
				}
			}
		default:
			add(where, "peers %v are neither only FQDN selectors nor only kube-dns", e.L3)
		}
	}
	return out
}

func allFQDN(sels types.Selectors) bool {
	for _, s := range sels {
		if _, ok := s.GetFQDNSelector(); !ok {
			return false
		}
	}
	return true
}

// allKubeDNS: each selector matches the kube-dns identity (that it matches
// no other synthetic peer, and names exactly kube-dns's labels, is checked
// separately).
func allKubeDNS(sels types.Selectors) bool {
	for _, s := range sels {
		ls, ok := s.(*types.LabelSelector)
		if !ok || !ls.Matches(KubeDNS.Labels) {
			return false
		}
	}
	return true
}

func fqdnPortRuleDiff(pr api.PortRule) string {
	switch {
	case pr.Listener != nil:
		return "has a listener: traffic would go to an Envoy configuration the contract does not know"
	case pr.TerminatingTLS != nil || pr.OriginatingTLS != nil:
		return "terminates or originates TLS"
	case pr.Rules != nil && len(pr.Rules.HTTP) > 0:
		return "has HTTP rules"
	}
	return ""
}

func dnsPortRuleDiff(pr api.PortRule) string {
	switch {
	case len(pr.Ports) == 0:
		return "kube-dns on every port: no ports"
	case pr.Listener != nil || pr.TerminatingTLS != nil || pr.OriginatingTLS != nil || len(pr.ServerNames) > 0:
		return "has a listener, TLS or server names"
	case pr.Rules != nil && len(pr.Rules.HTTP) > 0:
		return "has HTTP rules"
	}
	for _, pp := range pr.Ports {
		if pp.Port != "53" || (pp.EndPort != 0 && pp.EndPort != 53) ||
			!slices.Contains([]api.L4Proto{api.ProtoTCP, api.ProtoUDP, api.ProtoAny}, pp.Protocol) {
			return fmt.Sprintf("port %q endPort %d protocol %s: kube-dns may only be reached on port 53 (TCP, UDP or ANY)", pp.Port, pp.EndPort, pp.Protocol)
		}
	}
	return ""
}

// kubeDNSSelector: exactly the two kube-dns labels the host writes, plus
// the local cluster Parse adds (contract §4.3 rule 6).
func kubeDNSSelector(es api.EndpointSelector) bool {
	want := map[string]string{
		labels.LabelSourceK8sKeyPrefix + podNamespaceLabel: "kube-system",
		labels.LabelSourceK8sKeyPrefix + "k8s-app":         "kube-dns",
		labels.LabelSourceK8sKeyPrefix + clusterLabel:      ClusterName,
	}
	return es.LabelSelector != nil && len(es.MatchExpressions) == 0 && maps.Equal(es.MatchLabels, want)
}

// endpointSelectorDiff compares the rule's selector, as Parse leaves it,
// with the one contract §4.1 describes: the label key (any source) equal to
// the owner name, and the policy's namespace Parse adds.
func endpointSelectorDiff(es api.EndpointSelector, s Subject) string {
	if es.LabelSelector == nil {
		return "no endpoint selector"
	}
	want := map[string]string{
		labels.LabelSourceAnyKeyPrefix + s.LabelKey:        s.Owner,
		labels.LabelSourceK8sKeyPrefix + podNamespaceLabel: s.Namespace,
	}
	if len(es.MatchExpressions) > 0 || !maps.Equal(es.MatchLabels, want) {
		return fmt.Sprintf("want exactly matchLabels %v", want)
	}
	return ""
}

// subjectDiffs runs Cilium's own matcher on synthetic pods: the sandbox's
// pod must be selected, and every pod that differs from it in the label,
// its value or its namespace must not be.
func subjectDiffs(sel *types.LabelSelector, s Subject) []string {
	var out []string
	pod := func(extra ...string) labels.LabelArray {
		return labels.ParseLabelArray(append([]string{"k8s:" + clusterLabel + "=" + ClusterName, "k8s:app=agent"}, extra...)...)
	}
	nsLabel := "k8s:" + podNamespaceLabel + "="
	if sel == nil {
		return []string{"is missing"}
	}
	if !sel.Matches(pod("k8s:"+s.LabelKey+"="+s.Owner, nsLabel+s.Namespace)) {
		out = append(out, "does not select the sandbox's pod")
	}
	for name, lbls := range map[string]labels.LabelArray{
		"a pod of another sandbox":                 pod("k8s:"+s.LabelKey+"="+s.Owner+"x", nsLabel+s.Namespace),
		"a pod without the label":                  pod(nsLabel + s.Namespace),
		"the sandbox's name in another namespace":  pod("k8s:"+s.LabelKey+"="+s.Owner, nsLabel+s.Namespace+"-other"),
		"a pod whose namespace carries the label":  pod("k8s:io.cilium.k8s.namespace.labels."+s.LabelKey+"="+s.Owner, nsLabel+s.Namespace),
		"a pod with the label under another value": pod("k8s:"+s.LabelKey+"=", nsLabel+s.Namespace),
		"the host":  labels.ParseLabelArray("reserved:host"),
		"the world": labels.ParseLabelArray("reserved:world"),
	} {
		if sel.Matches(lbls) {
			out = append(out, "selects "+name)
		}
	}
	return out
}

// otherPeers are identities no admitted body may let the sandbox reach:
// everything but kube-dns and the FQDN identities of its own selectors.
func otherPeers(s Subject) []Peer {
	k8s := func(extra ...string) labels.LabelArray {
		return labels.ParseLabelArray(append([]string{"k8s:" + clusterLabel + "=" + ClusterName}, extra...)...)
	}
	return []Peer{
		{"kube-dns of another cluster", labels.ParseLabelArray("k8s:"+podNamespaceLabel+"=kube-system", "k8s:k8s-app=kube-dns", "k8s:"+clusterLabel+"=other")},
		{"another kube-system pod", k8s("k8s:"+podNamespaceLabel+"=kube-system", "k8s:k8s-app=metrics-server")},
		{"a kube-dns look-alike in the sandbox's namespace", k8s("k8s:"+podNamespaceLabel+"="+s.Namespace, "k8s:k8s-app=kube-dns")},
		{"another sandbox", k8s("k8s:"+podNamespaceLabel+"="+s.Namespace, "k8s:"+s.LabelKey+"=other")},
		{"the sandbox itself", k8s("k8s:"+podNamespaceLabel+"="+s.Namespace, "k8s:"+s.LabelKey+"="+s.Owner)},
		{"world", labels.ParseLabelArray("reserved:world")},
		{"world-ipv4", labels.ParseLabelArray("reserved:world-ipv4")},
		{"host", labels.ParseLabelArray("reserved:host")},
		{"remote-node", labels.ParseLabelArray("reserved:remote-node")},
		{"kube-apiserver", labels.ParseLabelArray("reserved:kube-apiserver")},
		{"health", labels.ParseLabelArray("reserved:health")},
		{"ingress", labels.ParseLabelArray("reserved:ingress")},
		{"unmanaged", labels.ParseLabelArray("reserved:unmanaged")},
		{"the metadata address", labels.ParseLabelArray("cidr:169.254.169.254/32", "reserved:world")},
		{"a private range", labels.ParseLabelArray("cidr:10.0.0.0/8", "reserved:world")},
		{"an FQDN identity of a selector the body does not hold", labels.LabelArray{labels.NewLabel("*.not-in-any-body.invalid", "", labels.LabelSourceFQDN), labels.WorldLabel}},
	}
}
