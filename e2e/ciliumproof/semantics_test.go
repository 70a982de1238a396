package ciliumproof

import (
	"math/rand/v2"
	"strings"
	"testing"

	ciliumdns "github.com/cilium/cilium/pkg/fqdn/dns"
	"github.com/cilium/cilium/pkg/fqdn/matchpattern"
	"github.com/cilium/cilium/pkg/policy/api"
)

// TestFQDNSemantics pins the table of contract §4.6: for each selector, the
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
		admitted  bool // by the fence (contract §4.3 rule 7)
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
			// The checker's statement of contract §4.6 agrees with the table
			// for the admitted forms, and knows no reach for the others.
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
				if problems, _ := CheckReach(tt.selector, rand.New(rand.NewPCG(1, 2))); len(problems) > 0 {
					t.Errorf("CheckReach(%s): %v", tt.selector.String(), problems)
				}
			}
		})
	}
}

// TestCheckReachFindsAWiderSelector shows the sampler catches a selector
// wider than its grammar entry: *example.com reaches evil-example.com.
func TestCheckReachFindsAWiderSelector(t *testing.T) {
	for _, s := range []api.FQDNSelector{{MatchPattern: "*example.com"}, {MatchPattern: "*"}, {MatchPattern: "*.com"}, {MatchPattern: "a*.example.com"}} {
		if _, wider := CheckReach(s, rand.New(rand.NewPCG(1, 2))); !wider {
			t.Errorf("CheckReach(%s) found no name outside the grammar", s.String())
		}
	}
	if _, wider := CheckReach(api.FQDNSelector{MatchPattern: "**.example.com"}, rand.New(rand.NewPCG(1, 2))); wider {
		t.Errorf("**.example.com reaches only subdomains of example.com, which the entry .example.com allows")
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
