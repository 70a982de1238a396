package ciliumproof

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/cilium/pkg/policy/api"

	fencev1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"

	"github.com/sandbox-fence/sandbox-fence/e2e/ciliumproof/reach/protocol"
)

// Subject is the sandbox a per-sandbox policy is for: its namespace, the
// configured label key and the owner name, the label's value: the policy
// selects the pods carrying that label.
type Subject struct {
	Namespace string
	LabelKey  string
	Owner     string
}

const (
	podNamespaceLabel = "io.kubernetes.pod.namespace"
	clusterLabel      = "io.cilium.k8s.policy.cluster"
)

// Finding is one way what a pod reaches leaves the contract.
type Finding struct {
	// Where is the flow or the part of the policy, e.g.
	// "sandbox → 93.184.0.3 (www.example.com)".
	Where  string
	Detail string
}

func (f Finding) String() string { return f.Where + ": " + f.Detail }

// neverReached are the addresses the baseline keeps every pod of an
// opted-in namespace from, whatever DNS answers: link-local (the cloud
// metadata address 169.254.169.254 among them) and AWS's IPv6 metadata address. They
// are the baseline's deny prefixes: were the baseline to deny more, its
// denials of addresses the contract lets a sandbox reach would fail the
// check as surely as a missing denial.
var neverReached = []netip.Prefix{
	netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("fe80::/10"), netip.MustParsePrefix("fd00:ec2::254/128"),
}

// within reports whether addr, or the IPv4 address an IPv4-mapped one
// reaches, is in one of prefixes.
func within(addr netip.Addr, prefixes []netip.Prefix) bool {
	for _, p := range prefixes {
		if p.Contains(addr) || p.Contains(addr.Unmap()) {
			return true
		}
	}
	return false
}

// The pods of every request. The sandbox is the pod the policy is for; the
// bystanders are pods no per-sandbox policy is for, each a way a policy
// could select more than its sandbox were its selector anything but the
// configured key and the owner's name; they must reach DNS and nothing
// else, what the baseline allows a pod no per-sandbox policy selects. The
// rest are only reached.
const (
	podSandbox = "sandbox"
	podKubeDNS = "kube-dns"
)

func requestPods(s Subject) (pods []protocol.Pod, bystanders []string) {
	ns := func(name string, extra ...string) map[string]string {
		m := map[string]string{"kubernetes.io/metadata.name": name}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	optedIn := func(name string, extra ...string) map[string]string {
		return ns(name, append([]string{fencev1.FencedNamespaceLabel, fencev1.FencedNamespaceValue}, extra...)...)
	}
	other := "other-sandbox"
	if s.Owner == other {
		other += "-2"
	}
	otherKey := "sandbox.example.org/owner"
	pods = []protocol.Pod{
		{Name: podSandbox, Namespace: s.Namespace, Labels: map[string]string{s.LabelKey: s.Owner, "app": "agent"},
			NamespaceLabels: optedIn(s.Namespace), ServiceAccount: "sandbox"},
		// Bystanders, pods[1:7].
		{Name: "another-sandbox", Namespace: s.Namespace, Labels: map[string]string{s.LabelKey: other, "app": "agent"},
			NamespaceLabels: optedIn(s.Namespace), ServiceAccount: "sandbox"},
		{Name: "unlabelled", Namespace: s.Namespace, Labels: map[string]string{"app": "agent"}, NamespaceLabels: optedIn(s.Namespace)},
		{Name: "empty-label", Namespace: s.Namespace, Labels: map[string]string{s.LabelKey: ""}, NamespaceLabels: optedIn(s.Namespace)},
		{Name: "owner-under-another-key", Namespace: s.Namespace, Labels: map[string]string{otherKey: s.Owner},
			NamespaceLabels: optedIn(s.Namespace)},
		{Name: "same-owner-elsewhere", Namespace: s.Namespace + "-other", Labels: map[string]string{s.LabelKey: s.Owner},
			NamespaceLabels: optedIn(s.Namespace + "-other")},
		{Name: "namespace-carries-the-label", Namespace: s.Namespace + "-labelled", Labels: map[string]string{"app": "agent"},
			NamespaceLabels: optedIn(s.Namespace+"-labelled", s.LabelKey, s.Owner)},
		// Only reached.
		{Name: podKubeDNS, Namespace: "kube-system", Labels: map[string]string{"k8s-app": "kube-dns"},
			NamespaceLabels: ns("kube-system"), ServiceAccount: "coredns"},
		{Name: "kube-dns-of-another-cluster", Namespace: "kube-system", Labels: map[string]string{"k8s-app": "kube-dns"},
			NamespaceLabels: ns("kube-system"), ServiceAccount: "coredns", Cluster: "other"},
		{Name: "kube-dns-look-alike", Namespace: s.Namespace, Labels: map[string]string{"k8s-app": "kube-dns"}, NamespaceLabels: optedIn(s.Namespace)},
		{Name: "metrics-server", Namespace: "kube-system", Labels: map[string]string{"k8s-app": "metrics-server"}, NamespaceLabels: ns("kube-system")},
		{Name: "unfenced-pod", Namespace: "default", Labels: map[string]string{"app": "web"}, NamespaceLabels: ns("default")},
	}
	for _, p := range pods[1:7] {
		bystanders = append(bystanders, p.Name)
	}
	return pods, bystanders
}

// reservedPeers are every reserved identity a packet can carry.
var reservedPeers = []string{"world", "world-ipv4", "world-ipv6", "host", "remote-node", "kube-apiserver", "health", "init", "ingress", "unmanaged"}

// rawAddresses are addresses no DNS answer of a request gives: public,
// private and link-local or metadata ones. No pod reaches any of them.
var rawAddresses = []string{
	"8.8.8.8", "1.1.1.1", "2001:4860:4860::8888",
	"10.0.0.1", "172.16.0.1", "192.168.1.1", "100.64.0.1", "fd00::1",
	"169.254.169.254", "169.254.170.2", "169.254.0.1", "fe80::1", "fe80::a9fe:a9fe", "fd00:ec2::254", "::ffff:169.254.169.254",
}

// metadataAnswers are the link-local and metadata addresses DNS answers give
// beside a name's own address: a *.nip.io-style name under an allowed entry
// resolves to them as easily as any other name: the host-name grammar
// admits any DNS name, so only the baseline's deny keeps them out.
var metadataAnswers = []string{
	"169.254.169.254", "::ffff:169.254.169.254", "fe80::a9fe:a9fe", "fd00:ec2::254", "169.254.170.2", "169.254.0.1", "fe80::1",
}

// answerAddress is the k-th name's own address: public IPv4, private IPv4
// and public IPv6 in turn, none of them a raw address.
func answerAddress(k int) string {
	switch k % 3 {
	case 0:
		return fmt.Sprintf("93.184.%d.%d", k>>8&255, k&255)
	case 1:
		return fmt.Sprintf("10.%d.%d.%d", 128+k>>16&127, k>>8&255, k&255)
	}
	return fmt.Sprintf("2606:2800:220:%x::1", k)
}

// The ports flows are looked up on: DNS, the ports toPorts forms open or
// leave closed (443 on both protocols, 80, 8050 inside the range
// 8000-8100), and ICMP echo, which an icmps rule opens to every peer. A
// bystander tries DNS, one other port and ICMP.
var (
	podPorts       = []string{"UDP/53", "TCP/53", "TCP/443", "UDP/443", "TCP/80", "ICMP/8"}
	addressPorts   = []string{"TCP/443", "UDP/443", "TCP/80", "TCP/8050", "ICMP/8"}
	bystanderPorts = []string{"UDP/53", "TCP/443", "ICMP/8"}
)

// bystanderPeers are the reserved identities and raw addresses a bystander
// tries beside every pod and the first answers of each domain: a policy
// that selects a bystander shows in any of them.
var bystanderPeers = []protocol.Peer{
	{Reserved: "world"}, {Reserved: "host"}, {Reserved: "remote-node"}, {Reserved: "kube-apiserver"},
	{IP: "8.8.8.8"}, {IP: "10.0.0.1"}, {IP: "169.254.169.254"}, {IP: "fd00:ec2::254"},
}

// Plan is one request to ciliumreach for a policy (or none), and what the
// contract says of each flow it looks up: what the policy's FQDN selectors
// reach, and what the baseline allows and denies.
type Plan struct {
	Request protocol.Request
	// expect holds one expectation per verdict, in the answer's order.
	expect []expectation
	// findings are what is outside the contract before any flow: a selector
	// whose reach the contract does not state.
	findings []Finding
}

type expectation struct {
	from string
	to   protocol.Peer
	port string
	// names are the DNS names the address answers for.
	names []string
	want  bool
	// dns marks kube-dns on port 53, which must go through the DNS proxy.
	dns bool
}

// NewPlan builds the request for policy (nil: no per-sandbox policy) written
// for s, beside the baseline at path baseline: every pod of requestPods,
// DNS answers for the names SampleNames gives around the domain of each of
// the policy's toFQDNs selectors (drawn from rng) and extra answers, and the
// flows from the sandbox and from every bystander.
func NewPlan(policy map[string]any, s Subject, baseline string, rng *rand.Rand, extra ...protocol.DNSAnswer) *Plan {
	p := &Plan{}
	allow, domains, findings := readAllowlist(policy)
	p.findings = findings
	if len(domains) == 0 {
		domains = []string{"example.com"} // answers no selector asked for
	}
	pods, bystanders := requestPods(s)
	body, err := json.Marshal(policy)
	if err != nil {
		panic(err) // a map decoded from JSON or YAML always encodes
	}
	p.Request = protocol.Request{Baseline: baseline, Policy: body, Pods: pods}

	// DNS answers, and the names each address answers for.
	names := map[string][]string{}
	var addresses []string
	addAnswer := func(a protocol.DNSAnswer) {
		p.Request.DNS = append(p.Request.DNS, a)
		for _, ip := range a.IPs {
			if names[ip] == nil {
				addresses = append(addresses, ip)
			}
			names[ip] = append(names[ip], a.Name)
		}
	}
	var firstNames []string // the addresses of each domain's first names, which bystanders try too
	k := 0
	for _, d := range domains {
		for j, n := range SampleNames(d, rng) {
			a := protocol.DNSAnswer{Name: n, IPs: []string{answerAddress(k)}}
			if j < len(metadataAnswers) || k%7 == 0 {
				a.IPs = append(a.IPs, metadataAnswers[k%len(metadataAnswers)])
			}
			if j < 4 {
				firstNames = append(firstNames, a.IPs[0])
			}
			addAnswer(a)
			k++
		}
	}
	for _, a := range extra {
		addAnswer(a)
	}

	var podPeers, reserved []protocol.Peer
	for _, pod := range pods {
		podPeers = append(podPeers, protocol.Peer{Pod: pod.Name})
	}
	for _, r := range reservedPeers {
		reserved = append(reserved, protocol.Peer{Reserved: r})
	}
	var rawPeers, answerPeers, bystanderAnswerPeers []protocol.Peer
	for _, ip := range rawAddresses {
		rawPeers = append(rawPeers, protocol.Peer{IP: ip})
	}
	for _, ip := range addresses {
		if !slices.Contains(rawAddresses, ip) {
			answerPeers = append(answerPeers, protocol.Peer{IP: ip})
		}
	}
	for _, ip := range firstNames {
		bystanderAnswerPeers = append(bystanderAnswerPeers, protocol.Peer{IP: ip})
	}

	// Whether the contract lets a pod send a flow: kube-dns on 53 for every
	// pod (the baseline); for the sandbox, an address a name of its
	// allowlist answered with, on a port that name's rule opens, unless it is
	// an address no pod reaches.
	want := func(from string, to protocol.Peer, port string) (bool, bool) {
		proto, n := splitPort(port)
		if to.Pod == podKubeDNS {
			return n == 53 && (proto == "UDP" || proto == "TCP"), true
		}
		if from != podSandbox || to.IP == "" {
			return false, false
		}
		addr := netip.MustParseAddr(to.IP)
		if within(addr, neverReached) {
			return false, false
		}
		return allow.reaches(names[to.IP], proto, n), false
	}
	add := func(from []string, to []protocol.Peer, ports []string) {
		p.Request.Lookups = append(p.Request.Lookups, protocol.Lookup{From: from, To: to, Ports: ports})
		for _, f := range from {
			for _, t := range to {
				for _, port := range ports {
					w, dns := want(f, t, port)
					p.expect = append(p.expect, expectation{from: f, to: t, port: port, names: names[t.IP], want: w, dns: dns})
				}
			}
		}
	}
	add([]string{podSandbox}, slices.Concat(podPeers, reserved), podPorts)
	add([]string{podSandbox}, slices.Concat(rawPeers, answerPeers), addressPorts)
	add(bystanders, slices.Concat(podPeers, bystanderPeers, bystanderAnswerPeers), bystanderPorts)
	return p
}

func splitPort(s string) (string, int) {
	proto, port, _ := strings.Cut(s, "/")
	n, _ := strconv.Atoi(port)
	return proto, n
}

// Check compares ciliumreach's answer with the plan: every flow Cilium
// allows the contract allows, and the other way round; kube-dns only
// through the DNS proxy; no peer the repository could not see. An empty
// result means the pods reach exactly what the contract says.
func (p *Plan) Check(ans protocol.Answer) []Finding {
	out := slices.Clone(p.findings)
	for _, d := range ans.Dropped {
		out = append(out, Finding{Where: "policy " + d, Detail: "the agent fills this peer in from cluster state; offline, what it reaches is unknown"})
	}
	for _, pod := range slices.Sorted(maps.Keys(ans.Unresolved)) {
		out = append(out, Finding{Where: "pod " + pod, Detail: "Cilium cannot compute its endpoint policy, so the agent cannot regenerate it: " + ans.Unresolved[pod]})
	}
	if len(ans.Verdicts) != len(p.expect) {
		return append(out, Finding{Where: "ciliumreach", Detail: fmt.Sprintf("%d verdicts for %d flows", len(ans.Verdicts), len(p.expect))})
	}
	// One finding for each pair of pod and peer, listing its ports.
	type pair struct {
		from string
		to   protocol.Peer
	}
	var order []pair
	problems := map[pair][]string{}
	for i, v := range ans.Verdicts {
		e := p.expect[i]
		if _, ok := ans.Unresolved[e.from]; ok {
			continue
		}
		var problem string
		switch {
		case v.Allowed && !e.want:
			problem = fmt.Sprintf("Cilium allows %s (%s), the contract does not", e.port, strings.Join(v.Rules, ", "))
		case !v.Allowed && e.want:
			problem = fmt.Sprintf("Cilium denies %s (%s), the contract allows it", e.port, orDefault(v.Rules))
		case v.Allowed && e.dns && v.ProxyPort == 0:
			problem = fmt.Sprintf("Cilium allows %s past the DNS proxy", e.port)
		default:
			continue
		}
		k := pair{e.from, e.to}
		if problems[k] == nil {
			order = append(order, k)
		}
		problems[k] = append(problems[k], problem)
	}
	for _, k := range order {
		r := ans.Peers[k.to.Key()]
		where := fmt.Sprintf("%s → %s", k.from, k.to)
		if ns := p.namesOf(k.to); len(ns) > 0 {
			where += " (" + strings.Join(ns, ", ") + ")"
		}
		where += fmt.Sprintf(" identity %d %v", r.Identity, r.Labels)
		if r.Prefix != "" {
			where += " via " + r.Prefix
		}
		out = append(out, Finding{Where: where, Detail: strings.Join(problems[k], "; ")})
	}
	return out
}

func (p *Plan) namesOf(to protocol.Peer) []string {
	for _, e := range p.expect {
		if e.to == to {
			return e.names
		}
	}
	return nil
}

func orDefault(rules []string) string {
	if len(rules) == 0 {
		return "no rule: default deny"
	}
	return strings.Join(rules, ", ")
}

// allowlist is a policy's egress as the contract's FQDN table reads it: each
// rule that has toFQDNs reaches the names its selectors reach, on the ports
// its toPorts opens.
type allowlist []fqdnRule

type fqdnRule struct {
	reach []func(name string) bool
	// ports are the ports toPorts opens; nil opens every port.
	ports []portRange
}

// portRange is a toPorts port as Cilium reads it: protocol "" (or ANY) for
// TCP, UDP and SCTP, port 0 for every port, a range up to endPort; a named
// port opens nothing to an address, which has no named ports. A rule
// without toPorts opens every protocol, ICMP included.
type portRange struct {
	proto  string
	lo, hi int
	named  bool
}

func (a allowlist) reaches(names []string, proto string, port int) bool {
	for _, r := range a {
		if !r.opens(proto, port) {
			continue
		}
		for _, reach := range r.reach {
			for _, n := range names {
				if reach(n) {
					return true
				}
			}
		}
	}
	return false
}

func (r fqdnRule) opens(proto string, port int) bool {
	if r.ports == nil {
		return true
	}
	for _, p := range r.ports {
		if !p.named && (p.proto == proto || p.proto == "" && proto != "ICMP") && (p.lo == 0 || p.lo <= port && port <= p.hi) {
			return true
		}
	}
	return false
}

// readAllowlist reads the policy's spec.egress as written: the allowlist,
// the domain to sample names around for each selector, and a finding for
// each selector whose reach the contract does not state.
func readAllowlist(policy map[string]any) (allow allowlist, domains []string, findings []Finding) {
	for i, r := range list(spec(policy), "egress") {
		rule, _ := r.(map[string]any)
		fqdns, ok := rule["toFQDNs"].([]any)
		if !ok {
			continue
		}
		fr := fqdnRule{ports: readPorts(rule["toPorts"])}
		for j, e := range fqdns {
			m, _ := e.(map[string]any)
			var sel api.FQDNSelector
			sel.MatchName, _ = m["matchName"].(string)
			sel.MatchPattern, _ = m["matchPattern"].(string)
			if reach, ok := ContractReach(sel); ok {
				fr.reach = append(fr.reach, reach)
			} else {
				findings = append(findings, Finding{Where: fmt.Sprintf("spec.egress[%d].toFQDNs[%d]", i, j),
					Detail: sel.String() + " is no form the contract's FQDN table describes: what it reaches is not stated"})
			}
			if d := sampleDomain(sel); !slices.Contains(domains, d) {
				domains = append(domains, d)
			}
		}
		allow = append(allow, fr)
	}
	return allow, domains, findings
}

// sampleDomain is the domain whose names tell what sel reaches: its grammar
// entry's host, else its text without stars and outer dots, else
// example.com.
func sampleDomain(sel api.FQDNSelector) string {
	if e, ok := GrammarEntry(sel); ok {
		return e.Host
	}
	d := strings.Trim(strings.ReplaceAll(strings.ToLower(sel.MatchName+sel.MatchPattern), "*", ""), ".")
	if strings.Contains(d, ".") && dnsName(d) {
		return d
	}
	return "example.com"
}

func readPorts(v any) []portRange {
	tp, _ := v.([]any)
	if len(tp) == 0 {
		return nil
	}
	var out []portRange
	for _, e := range tp {
		m, _ := e.(map[string]any)
		ports, _ := m["ports"].([]any)
		if len(ports) == 0 {
			return nil // an entry without ports opens every port
		}
		for _, pp := range ports {
			pm, _ := pp.(map[string]any)
			pr := portRange{}
			if s, _ := pm["protocol"].(string); s != "ANY" {
				pr.proto = s
			}
			s, _ := pm["port"].(string)
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				pr.named = true
			}
			pr.lo, pr.hi = n, n
			if end := toInt(pm["endPort"]); end > n {
				pr.hi = end
			}
			out = append(out, pr)
		}
	}
	return out
}

func toInt(v any) int {
	switch n := v.(type) {
	case int64:
		return int(n)
	case float64:
		return int(n)
	case int:
		return n
	}
	return 0
}
