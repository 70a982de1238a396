//go:build cilium

package ciliumproof

import (
	"math/rand/v2"
	"strings"
	"testing"

	ciliumdns "github.com/cilium/cilium/pkg/fqdn/dns"
	"github.com/cilium/cilium/pkg/fqdn/matchpattern"
	"github.com/cilium/cilium/pkg/policy/api"
)

// TestFQDNSemantics pins the contract's FQDN table: for each selector, the
// names Cilium's own matcher lets it reach and those it does not. The
// matcher is FQDNSelector.ToRegex, the regexp the agent's name manager
// registers for a toFQDNs entry, applied to a name as the DNS proxy hands it
// over (dns.FQDN: lowercased, with the root dot). A new Cilium version that
// reads a selector differently fails here first; the contract must then
// change with it.
func TestFQDNSemantics(t *testing.T) {
	long := strings.Repeat("a", 63)
	tests := []struct {
		name      string
		selector  api.FQDNSelector
		admitted  bool // by the fence: a lowercase matchName, or *.<domain> of two labels or more
		reaches   []string
		unreached []string
	}{
		{"a matchName reaches exactly its name, in any case, with or without the root dot",
			api.FQDNSelector{MatchName: "example.com"}, true,
			[]string{"example.com", "EXAMPLE.COM", "Example.Com.", "example.com."},
			[]string{"www.example.com", "xexample.com", "example.com.evil.com", "example.co", "example.com.."}},
		{"*.<domain> reaches names exactly one label below the domain",
			api.FQDNSelector{MatchPattern: "*.example.com"}, true,
			[]string{"www.example.com", "WWW.Example.COM.", "a.example.com", long + ".example.com"},
			[]string{"example.com", "a.b.example.com", "x.y.z.example.com", "wwwexample.com", "evil-example.com", "www.example.com.evil.com", "www.example.co"}},
		{"the label below may hold an underscore or an outer hyphen, which the host grammar does not",
			api.FQDNSelector{MatchPattern: "*.example.com"}, true,
			[]string{"_dmarc.example.com", "-x.example.com", "x-.example.com", "a_b.example.com"},
			[]string{"a*b.example.com", `a\.b.example.com`}},
		{"*.<two labels> opens one label under a public suffix too",
			api.FQDNSelector{MatchPattern: "*.co.uk"}, true,
			[]string{"anything.co.uk"},
			[]string{"co.uk", "a.b.co.uk"}},
		{"**. reaches every depth below the domain, but not the domain",
			api.FQDNSelector{MatchPattern: "**.example.com"}, false,
			[]string{"www.example.com", "a.b.example.com", "x.y.z.example.com"},
			[]string{"example.com", "evil.com"}},
		{"* alone reaches every name",
			api.FQDNSelector{MatchPattern: "*"}, false,
			[]string{"evil.com", "kubernetes.default.svc.cluster.local", "x"},
			nil},
		{"a star glued to the domain crosses its boundary",
			api.FQDNSelector{MatchPattern: "*example.com"}, false,
			[]string{"example.com", "xexample.com", "evil-example.com"},
			[]string{"www.example.com"}},
		{"a star inside a label matches within that label only",
			api.FQDNSelector{MatchPattern: "sub*.example.com"}, false,
			[]string{"sub.example.com", "subdomain.example.com"},
			[]string{"www.example.com", "a.sub.example.com"}},
		{"*.<one label> opens a whole top-level domain's first level",
			api.FQDNSelector{MatchPattern: "*.com"}, false,
			[]string{"evil.com", "example.com"},
			[]string{"a.example.com"}},
		{"a trailing dot or upper case in a matchName means the same name",
			api.FQDNSelector{MatchName: "Example.COM."}, false,
			[]string{"example.com", "EXAMPLE.com."},
			[]string{"www.example.com"}},
		{"a trailing dot in a matchPattern means the same pattern",
			api.FQDNSelector{MatchPattern: "*.example.com."}, false,
			[]string{"www.example.com"},
			[]string{"example.com", "a.b.example.com"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			re, err := tt.selector.ToRegex()
			if err != nil {
				t.Fatalf("Cilium cannot compile %s: %v", tt.selector.String(), err)
			}
			for _, n := range tt.reaches {
				if !re.MatchString(ciliumdns.FQDN(n)) {
					t.Errorf("%s does not reach %q (regexp %s)", tt.selector.String(), n, re)
				}
			}
			for _, n := range tt.unreached {
				if re.MatchString(ciliumdns.FQDN(n)) {
					t.Errorf("%s reaches %q (regexp %s)", tt.selector.String(), n, re)
				}
			}
			// The checker's statement of the contract's FQDN table agrees
			// with it for the admitted forms, and knows no reach for the
			// others.
			reach, described := ContractReach(tt.selector)
			if described != tt.admitted {
				t.Fatalf("ContractReach describes %s: %v, want %v", tt.selector.String(), described, tt.admitted)
			}
			if described {
				for _, n := range tt.reaches {
					if !reach(n) {
						t.Errorf("ContractReach(%s) leaves out %q", tt.selector.String(), n)
					}
				}
				for _, n := range tt.unreached {
					if reach(n) {
						t.Errorf("ContractReach(%s) includes %q", tt.selector.String(), n)
					}
				}
			}
		})
	}
}

// TestTheReachCheckFindsWhatTheContractForbids: bodies the shipped fence
// refuses, each the host's body with one change, run through ciliumreach
// without the fence. The reach check must report each (a check that finds
// nothing here would pass any fence).
func TestTheReachCheckFindsWhatTheContractForbids(t *testing.T) {
	p := &Prover{Reach: startReach(t), Baseline: baselinePath(t)}
	egressRule := func(rule map[string]any) func(b map[string]any) {
		return func(b map[string]any) { appendEgress(b, rule) }
	}
	ports := func(port, protocol string) []any {
		return []any{map[string]any{"ports": []any{map[string]any{"port": port, "protocol": protocol}}}}
	}
	tests := []struct {
		name   string
		change func(b map[string]any)
		want   string // in some finding
	}{
		{"a star glued to the domain reaches names outside it", egressRule(map[string]any{"toFQDNs": []any{map[string]any{"matchPattern": "*example.com"}}}),
			"evilexample.com"},
		{"a lone star reaches every name", egressRule(map[string]any{"toFQDNs": []any{map[string]any{"matchPattern": "*"}}}),
			"Cilium allows"},
		{"**. reaches deeper than the contract's one label", egressRule(map[string]any{"toFQDNs": []any{map[string]any{"matchPattern": "**.example.com"}}}),
			"no form the contract's FQDN table describes"},
		{"toEntities world reaches every address", egressRule(map[string]any{"toEntities": []any{"world"}}),
			"sandbox → 8.8.8.8"},
		{"toCIDRSet 0.0.0.0/0 reaches public and private addresses", egressRule(map[string]any{"toCIDRSet": []any{map[string]any{"cidr": "0.0.0.0/0"}}}),
			"sandbox → 10.0.0.1"},
		{"toEntities cluster reaches the other pods and the host", egressRule(map[string]any{"toEntities": []any{"cluster"}}),
			"sandbox → reserved:host"},
		{"an icmps rule opens ICMP to every peer", egressRule(map[string]any{"icmps": []any{map[string]any{"fields": []any{map[string]any{"type": int64(8)}}}}}),
			"Cilium allows ICMP/8"},
		{"toServices is filled in from cluster state the repository does not hold",
			egressRule(map[string]any{"toServices": []any{map[string]any{"k8sService": map[string]any{"serviceName": "kubernetes", "namespace": "default"}}}}),
			"toServices"},
		{"an empty toEndpoints selector reaches every pod of the namespace",
			egressRule(map[string]any{"toEndpoints": []any{map[string]any{}}, "toPorts": ports("53", "ANY")}), "sandbox → pod another-sandbox"},
		{"kube-dns on another port", egressRule(map[string]any{"toEndpoints": []any{map[string]any{"matchLabels": kubeDNSLabels}}, "toPorts": ports("443", "TCP")}),
			"sandbox → pod kube-dns"},
		{"an empty endpointSelector gives every pod of the namespace the allowlist", func(b map[string]any) {
			spec(b)["endpointSelector"] = map[string]any{}
		}, "another-sandbox → "},
		{"egressDeny of world takes the allowlist away", func(b map[string]any) {
			spec(b)["egressDeny"] = []any{map[string]any{"toEntities": []any{"world"}}}
		}, "the contract allows it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := hostBody(t, "registry.npmjs.org", ".example.com")
			tt.change(b.Object)
			plan := NewPlan(b.Object, b.Subject, p.Baseline, rand.New(rand.NewPCG(1, 2)))
			ans, err := p.Reach.Ask(plan.Request)
			if err != nil {
				t.Fatal(err)
			}
			findings := plan.Check(ans)
			for _, f := range findings {
				if strings.Contains(f.String(), tt.want) {
					return
				}
			}
			t.Errorf("no finding mentions %q; findings:\n%v", tt.want, findings)
		})
	}
}

// TestDNSRuleSelectorsCompileLikeToFQDNs: the kube-dns rule's rules.dns
// entries (what the sandbox may ask kube-dns about) go through the same
// pattern validation; "*" there is Cilium's match-all.
func TestDNSRuleSelectorsCompileLikeToFQDNs(t *testing.T) {
	re, err := matchpattern.Validate(matchpattern.Sanitize("*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"evil.com.", "a.b.c.example.com."} {
		if !re.MatchString(n) {
			t.Errorf("rules.dns * does not let the sandbox ask about %q", n)
		}
	}
	if err := (&api.PortRuleDNS{MatchPattern: "*"}).Sanitize(); err != nil {
		t.Error(err)
	}
}
