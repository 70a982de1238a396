package ciliumproof

import (
	"math/rand/v2"
	"regexp"
	"strings"

	"github.com/cilium/cilium/pkg/policy/api"

	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// Entry is one host entry of the contract's host-name grammar, read
// as a set of names: the bare host, and with Subdomains every name below it
// too (the leading-dot form).
type Entry struct {
	Host       string
	Subdomains bool
}

// canonical is a name as DNS compares it: lowercase, without the root dot
// (the sampled names are ASCII, so strings.ToLower is DNS's case folding).
func canonical(name string) string { return strings.TrimSuffix(strings.ToLower(name), ".") }

// GrammarEntry is the grammar entry whose names a selector stands for, when
// there is one: matchName m is the host m; matchPattern *.d, **.d (any run
// of stars, then a dot) stands for .d, and a pattern without a star for the
// host it names. Case and one trailing dot are ignored, as Cilium ignores
// them. A pattern with a star anywhere else (*, *example.com, a*.example.com,
// a.*.example.com) stands for no entry.
func GrammarEntry(s api.FQDNSelector) (Entry, bool) {
	if s.MatchName != "" && s.MatchPattern != "" {
		return Entry{}, false
	}
	if s.MatchName != "" {
		return entryOf(canonical(s.MatchName), false)
	}
	p := canonical(s.MatchPattern)
	if !strings.Contains(p, "*") {
		return entryOf(p, false)
	}
	rest := strings.TrimLeft(p, "*")
	if !strings.HasPrefix(rest, ".") || strings.Contains(rest, "*") {
		return Entry{}, false
	}
	return entryOf(rest[1:], true)
}

func entryOf(host string, subdomains bool) (Entry, bool) {
	in := host
	if subdomains {
		in = "." + host
	}
	norm, err := fence.NormalizeHost(in)
	if err != nil || norm != in {
		return Entry{}, false
	}
	return Entry{Host: host, Subdomains: subdomains}, true
}

// dnsLabel is Cilium's DNS character class (matchpattern's
// allowedDNSCharsREGroup), restated here so that a change in Cilium shows up
// as a disagreement instead of being followed silently.
var dnsLabel = regexp.MustCompile(`^[-a-z0-9_]+$`)

// ContractReach is what the contract's FQDN table says an admitted selector
// lets a sandbox reach, for the two forms the fence admits (no other form
// has a reach anyone stated, so the fence refuses them):
//
//   - matchName h (h a host of the grammar): exactly h;
//   - matchPattern *.d (.d a leading-dot entry of the grammar): every name of
//     exactly one more label than d, ending in .d, whose extra label is made of
//     letters, digits, '-' and '_' (Cilium's DNS characters; DNS itself bounds
//     a label to 1-63 octets).
//
// Names compare as DNS compares them (case, one root dot). ok is false for
// every other form: the contract says nothing of its reach.
func ContractReach(s api.FQDNSelector) (reach func(name string) bool, ok bool) {
	e, ok := GrammarEntry(s)
	if !ok {
		return nil, false
	}
	switch {
	case s.MatchName == e.Host:
		return func(name string) bool { return canonical(name) == e.Host }, true
	case s.MatchName == "" && s.MatchPattern == "*."+e.Host:
		return func(name string) bool {
			label, ok := strings.CutSuffix(canonical(name), "."+e.Host)
			return ok && dnsLabel.MatchString(label)
		}, true
	}
	return nil, false
}

// SampleNames returns names DNS can carry (labels of 1-63 octets, at most
// 253 characters without the root dot) around domain: the domain itself in
// every case and root-dot form, names one and several labels below it with
// every character Cilium's class holds and some it does not, suffix
// look-alikes, its parent and siblings, and eight random names.
func SampleNames(domain string, rng *rand.Rand) []string {
	parent := domain
	if i := strings.IndexByte(domain, '.'); i >= 0 {
		parent = domain[i+1:]
	}
	fixed := []string{
		domain, strings.ToUpper(domain), domain + ".",
		"www." + domain, "WWW." + domain, "www." + domain + ".", "Www." + strings.ToUpper(domain) + ".",
		"_x." + domain, "-x." + domain, "x-." + domain, "x_y." + domain, "0." + domain, "a." + domain,
		strings.Repeat("a", 63) + "." + domain, "*." + domain, `\*.` + domain, `a\.b.` + domain, "a b." + domain,
		"a.b." + domain, "a.b.c." + domain, "_a._b." + domain, "www." + domain + "..",
		"x" + domain, "x-" + domain, "evil" + domain, "_" + domain, domain + ".evil.com", "www." + domain + ".evil.com",
		domain + "x", domain + "-x", parent, "other." + parent, "x.other." + parent, "evil.com", "com", "example.org", "localhost",
		"kubernetes.default.svc.cluster.local", "metadata.google.internal", "169.254.169.254", "10.0.0.1",
	}
	out := make([]string, 0, len(fixed)+8)
	for _, n := range fixed {
		if dnsName(n) {
			out = append(out, n)
		}
	}
	for range 8 {
		var b strings.Builder
		depth := rng.IntN(4)
		for range depth {
			b.WriteString(randomLabel(rng))
			b.WriteByte('.')
		}
		if rng.IntN(8) == 0 {
			b.WriteString(randomLabel(rng) + "." + randomLabel(rng))
		} else {
			b.WriteString(domain)
		}
		if n := b.String(); dnsName(n) {
			out = append(out, n)
		}
	}
	return out
}

const labelAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"

func randomLabel(rng *rand.Rand) string {
	n := 1 + rng.IntN(8)
	if rng.IntN(16) == 0 {
		n = 63
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = labelAlphabet[rng.IntN(len(labelAlphabet))]
	}
	if rng.IntN(32) == 0 {
		b[rng.IntN(n)] = "*\\ ~"[rng.IntN(4)]
	}
	return string(b)
}

// dnsName reports whether DNS can carry name as a query name: 1-63 octets a
// label, at most 253 characters without the root dot (255 octets on the
// wire). Presentation escapes count as written; close enough for sampling.
func dnsName(name string) bool {
	n := strings.TrimSuffix(name, ".")
	if n == "" || len(n) > 253 {
		return false
	}
	for _, l := range strings.Split(n, ".") {
		if len(l) == 0 || len(l) > 63 {
			return false
		}
	}
	return true
}
