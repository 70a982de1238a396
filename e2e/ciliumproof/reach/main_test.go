package main

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/sandbox-fence/sandbox-fence/e2e/ciliumproof/reach/protocol"
)

const baselineFile = "../../../config/components/cilium-baseline/baseline.yaml"

func cnp(rules ...string) json.RawMessage {
	return json.RawMessage(`{"apiVersion":"cilium.io/v2","kind":"CiliumNetworkPolicy",
	 "metadata":{"name":"namzu-sbx-0000","namespace":"sbx"},
	 "spec":{"endpointSelector":{"matchLabels":{"sandbox.namzu.ai/per-sandbox-egress":"claim-a"}},
	  "egress":[{"toEndpoints":[{"matchLabels":{"k8s:io.kubernetes.pod.namespace":"kube-system","k8s:k8s-app":"kube-dns"}}],
	    "toPorts":[{"ports":[{"port":"53","protocol":"ANY"}],"rules":{"dns":[{"matchPattern":"*"}]}}]}` +
		strings.Join(append([]string{""}, rules...), ",") + `]}}`)
}

var (
	optedIn = map[string]string{"fence.sandbox.namzu.ai/enabled": "true"}
	pods    = []protocol.Pod{
		{Name: "sandbox", Namespace: "sbx", Labels: map[string]string{"sandbox.namzu.ai/per-sandbox-egress": "claim-a"}, NamespaceLabels: optedIn},
		{Name: "other", Namespace: "sbx", Labels: map[string]string{"sandbox.namzu.ai/per-sandbox-egress": "claim-b"}, NamespaceLabels: optedIn},
		{Name: "kube-dns", Namespace: "kube-system", Labels: map[string]string{"k8s-app": "kube-dns"}, ServiceAccount: "coredns"},
	}
	answers = []protocol.DNSAnswer{
		{Name: "example.com", IPs: []string{"93.184.215.14"}},
		{Name: "169-254-169-254.nip.io", IPs: []string{"169.254.169.254"}},
		{Name: "evil.com", IPs: []string{"93.184.215.15"}},
	}
	peers = []protocol.Peer{{Pod: "kube-dns"}, {Reserved: "world"}, {IP: "93.184.215.14"}, {IP: "169.254.169.254"}, {IP: "93.184.215.15"}}
	ports = []string{"UDP/53", "TCP/443"}
)

// TestServeAnswersWithCiliumsRepository runs the protocol as e2e/ciliumproof
// does: requests in, one answer a line out, in order, and reads each answer
// as a pod's reach.
func TestServeAnswersWithCiliumsRepository(t *testing.T) {
	fqdns := `{"toFQDNs":[{"matchName":"example.com"},{"matchPattern":"*.nip.io"}]}`
	reqs := []protocol.Request{
		{ID: 1, Policy: cnp(fqdns)},
		{ID: 2, Policy: json.RawMessage("null")},
		{ID: 3, Policy: cnp(`{"toFQDNs":[{"matchName":"example.com"}],"toPorts":[{"ports":[{"port":"443"}],"serverNames":["example.com"],"rules":{"dns":[{"matchName":"example.com"}]}}]}`)},
		{ID: 4, Policy: cnp(fqdns, `{"toServices":[{"k8sService":{"serviceName":"kubernetes","namespace":"default"}}]}`)},
		{ID: 5, Policy: cnp(`{"toFQDNs":[{"matchName":"example.com"}],"toPorts":[{"ports":[{"port":"443","protocol":"TCP"}],"serverNames":["example.com"]}]}`,
			`{"toFQDNs":[{"matchName":"example.com"}],"toPorts":[{"ports":[{"port":"443","protocol":"TCP"}],"rules":{"dns":[{"matchName":"example.com"}]}}]}`)},
		{ID: 6, Lookups: []protocol.Lookup{{From: []string{"nobody"}, To: peers, Ports: ports}}},
	}
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for _, r := range reqs {
		r.Baseline = baselineFile
		r.Pods, r.DNS = pods, answers
		if r.Lookups == nil {
			r.Lookups = []protocol.Lookup{{From: []string{"sandbox", "other"}, To: peers, Ports: ports}}
		}
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := serve(context.Background(), &in, &out); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(&out)
	dec.DisallowUnknownFields()
	ans := map[int]protocol.Answer{}
	for range reqs {
		var a protocol.Answer
		if err := dec.Decode(&a); err != nil {
			t.Fatal(err)
		}
		ans[a.ID] = a
	}

	// The sandbox reaches kube-dns on 53 through the DNS proxy and
	// example.com; the *.nip.io name's metadata address is denied by the
	// baseline, whose cidr: label the ipcache gave the answered address.
	// The other pod reaches DNS only.
	allowed := func(a protocol.Answer) []string {
		var out []string
		i := 0
		for _, from := range []string{"sandbox", "other"} {
			for _, p := range peers {
				for _, port := range ports {
					if v := a.Verdicts[i]; v.Allowed {
						s := from + " " + p.Key() + " " + port
						if v.ProxyPort != 0 {
							s += " proxy"
						}
						out = append(out, s)
					}
					i++
				}
			}
		}
		return out
	}
	dnsOnly := []string{"sandbox pod/kube-dns UDP/53 proxy", "other pod/kube-dns UDP/53 proxy"}
	for _, tt := range []struct {
		id   int
		want []string
	}{
		{1, []string{"sandbox pod/kube-dns UDP/53 proxy", "sandbox ip/93.184.215.14 UDP/53", "sandbox ip/93.184.215.14 TCP/443",
			"other pod/kube-dns UDP/53 proxy"}},
		{2, dnsOnly},
		{3, dnsOnly},
		{5, dnsOnly[1:]}, // the sandbox's policy is unresolved: nothing
	} {
		a := ans[tt.id]
		if a.Error != "" || len(a.Verdicts) != 2*len(peers)*len(ports) {
			t.Errorf("request %d: error %q, %d verdicts", tt.id, a.Error, len(a.Verdicts))
			continue
		}
		if got := allowed(a); !slices.Equal(got, tt.want) {
			t.Errorf("request %d allows\n  %v\nwant\n  %v", tt.id, got, tt.want)
		}
	}
	meta := ans[1].Peers["ip/169.254.169.254"]
	if !slices.Contains(meta.Labels, "fqdn:*.nip.io") || !slices.Contains(meta.Labels, "cidr:169.254.0.0/16") || meta.Prefix != "169.254.169.254/32" {
		t.Errorf("169.254.169.254, answered for a *.nip.io name: %+v, want the labels fqdn:*.nip.io and cidr:169.254.0.0/16 on its /32", meta)
	}
	if got := ans[1].Verdicts[len(ports)*3+1].Rules; !slices.Equal(got, []string{"CiliumClusterwideNetworkPolicy sandbox-fence-baseline"}) {
		t.Errorf("the metadata address is denied by %v, want the baseline", got)
	}
	if ans[2].ParseError != "" || ans[3].ParseError == "" {
		t.Errorf("parse errors: no policy %q, serverNames beside rules.dns %q (want none, then Cilium's refusal)", ans[2].ParseError, ans[3].ParseError)
	}
	if d := ans[4].Dropped; len(d) != 1 || !strings.Contains(d[0], "toServices") {
		t.Errorf("dropped peers of a toServices rule: %v", d)
	}
	if u := ans[5].Unresolved; len(u) != 1 || !strings.Contains(u["sandbox"], "conflicting L7 parsers") {
		t.Errorf("serverNames and rules.dns on one port of one name: unresolved %v, want the sandbox's policy", u)
	}
	if e := ans[6].Error; !strings.Contains(e, `"nobody"`) {
		t.Errorf("a lookup from an unknown pod: error %q", e)
	}
}

// TestServeRefusesAnUnknownField: a field the program does not know ends the
// stream, so that the two sides cannot drift apart silently.
func TestServeRefusesAnUnknownField(t *testing.T) {
	err := serve(context.Background(), strings.NewReader(`{"id":1,"baseline":"x","flows":[]}`+"\n"), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), `unknown field "flows"`) {
		t.Errorf("serve: %v, want the unknown field refused", err)
	}
}
