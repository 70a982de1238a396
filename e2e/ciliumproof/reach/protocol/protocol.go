// Package protocol is ciliumreach's wire format, one JSON object a line
// each way: the program (package main beside it) and its caller
// (e2e/ciliumproof) share these types, so neither restates the other's.
// It imports nothing of Kubernetes or Cilium: the two sides build against
// different k8s.io releases.
package protocol

import "encoding/json"

// Request is one line of the input: a cluster of pods under the baseline and
// at most one CiliumNetworkPolicy, the DNS answers the pods' DNS proxy sees,
// and the flows to look up.
type Request struct {
	ID int `json:"id"`
	// Baseline is the path of a CiliumClusterwideNetworkPolicy (YAML or
	// JSON), read once per path; empty for a cluster without one.
	Baseline string `json:"baseline"`
	// Policy is a CiliumNetworkPolicy as the API server stores it, or null.
	Policy json.RawMessage `json:"policy"`
	Pods   []Pod           `json:"pods"`
	// DNS are answers, in order, as the DNS proxy hands them to the agent.
	DNS     []DNSAnswer `json:"dns"`
	Lookups []Lookup    `json:"lookups"`
}

// Pod is a pod as the agent reads it from Kubernetes: its identity labels are
// derived from these with Cilium's own code.
type Pod struct {
	Name            string            `json:"name"`
	Namespace       string            `json:"namespace"`
	Labels          map[string]string `json:"labels,omitempty"`
	NamespaceLabels map[string]string `json:"namespaceLabels,omitempty"`
	ServiceAccount  string            `json:"serviceAccount,omitempty"`
	// Cluster is the pod's cluster (a cluster mesh peer); empty is the
	// agent's own.
	Cluster string `json:"cluster,omitempty"`
}

// DNSAnswer is the addresses one query for Name returned.
type DNSAnswer struct {
	Name string   `json:"name"`
	IPs  []string `json:"ips"`
}

// Lookup asks for every flow from each of From, to each of To, on each of
// Ports ("TCP/443", "UDP/53", "SCTP/443"); the verdicts come in that order.
type Lookup struct {
	From  []string `json:"from"`
	To    []Peer   `json:"to"`
	Ports []string `json:"ports"`
}

// Peer is exactly one of a pod of the request, a reserved identity by its
// name (world, host, kube-apiserver, ...), or an address.
type Peer struct {
	Pod      string `json:"pod,omitempty"`
	Reserved string `json:"reserved,omitempty"`
	IP       string `json:"ip,omitempty"`
}

// Answer is one line of the output, for the request of the same ID.
type Answer struct {
	ID int `json:"id"`
	// Error says why the request could not be answered; nothing else is set.
	Error string `json:"error,omitempty"`
	// ParseError is Cilium's refusal of the policy (decoding, Parse and
	// Sanitize). The agent then imports nothing of it, and neither does the
	// repository here: the verdicts are the baseline's alone.
	ParseError string `json:"parseError,omitempty"`
	// Dropped names each peer of the policy that the agent resolves from
	// cluster state this repository does not hold (toServices, toGroups,
	// toRequires), so its verdicts say nothing about that peer.
	Dropped []string `json:"dropped,omitempty"`
	// Unresolved holds, by pod, why the repository could not compute the
	// pod's endpoint policy (ComputeSelectorPolicy failed): the agent then
	// cannot regenerate the endpoint. Its verdicts are all "denied".
	Unresolved map[string]string `json:"unresolved,omitempty"`
	// Peers are the identities the lookups' peers resolve to, by Key.
	Peers    map[string]Resolved `json:"peers"`
	Verdicts []Verdict           `json:"verdicts"`
}

// String names the peer in messages.
func (p Peer) String() string {
	switch {
	case p.Pod != "":
		return "pod " + p.Pod
	case p.Reserved != "":
		return "reserved:" + p.Reserved
	}
	return p.IP
}

// Key names a peer in Answer.Peers: "pod/<name>", "reserved/<name>" or
// "ip/<address as written>".
func (p Peer) Key() string {
	switch {
	case p.Pod != "":
		return "pod/" + p.Pod
	case p.Reserved != "":
		return "reserved/" + p.Reserved
	}
	return "ip/" + p.IP
}

// Resolved is a peer's identity: its number and labels, and for an address
// the prefix that gave it, found as the datapath finds it: the longest prefix
// the ipcache holds for the address, else the world identity of its family
// (Prefix is then empty).
type Resolved struct {
	Identity uint32   `json:"identity"`
	Labels   []string `json:"labels"`
	Prefix   string   `json:"prefix,omitempty"`
}

// Verdict is the endpoint policy's answer for one flow; its peer's identity
// is in Answer.Peers.
type Verdict struct {
	Allowed bool `json:"allowed,omitempty"`
	// ProxyPort is the proxy the flow is redirected to (the DNS proxy, or
	// Envoy for L7 and TLS rules); 0 for none.
	ProxyPort uint16 `json:"proxyPort,omitempty"`
	// Rules are the policies whose rules decided it ("CiliumNetworkPolicy
	// ns/name"); empty when nothing matched and the default deny decided.
	Rules []string `json:"rules,omitempty"`
}
