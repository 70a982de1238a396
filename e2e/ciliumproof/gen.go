package ciliumproof

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// Body is one generated CiliumNetworkPolicy and how it was made.
type Body struct {
	Object map[string]any
	// Subject is the sandbox of the body pkg/fence built before mutation.
	Subject Subject
	// Hosts are the host-name entries that body was built from.
	Hosts []string
	// Mutations name what was changed, in order; none means the body is
	// exactly what pkg/fence writes.
	Mutations []string
	// Update, when set, makes the request an UPDATE of the unmutated body
	// (the host's merge-PATCH replacement after a 409); else a CREATE.
	Update bool
	// Base is the unmutated body.
	Base map[string]any
}

// Generator makes bodies from a random source: the host's body for random
// hosts and owners, then zero to three mutations drawn from a catalogue that
// touches every field of the CiliumNetworkPolicy schema, weighted toward
// changes the fence admits as much as toward those it must deny.
type Generator struct {
	rng *rand.Rand
	// Namespace is where bodies are written; LabelKeys the label keys bodies
	// use (the FenceConfig under which each is evaluated must agree).
	Namespace string
	LabelKeys []string
}

// NewGenerator returns a generator drawing from src.
func NewGenerator(src rand.Source, namespace string, labelKeys ...string) *Generator {
	if len(labelKeys) == 0 {
		labelKeys = []string{fence.DefaultPerSandboxLabelKey}
	}
	return &Generator{rng: rand.New(src), Namespace: namespace, LabelKeys: labelKeys}
}

// Rand is the generator's random source, for samplers that should follow
// the same stream.
func (g *Generator) Rand() *rand.Rand { return g.rng }

// Next returns the next body.
func (g *Generator) Next() Body {
	in := fence.PolicyInput{
		Owner:     fence.PolicyOwner{Kind: pick(g.rng, fence.OwnerKindSandboxClaim, fence.OwnerKindSandbox), Name: g.ownerName(), UID: g.uid()},
		Namespace: g.Namespace,
		LabelKey:  pick(g.rng, g.LabelKeys...),
		Hosts:     g.hosts(),
	}
	u, err := fence.BuildPerSandboxPolicy(in)
	if err != nil {
		panic(fmt.Sprintf("the generator made an input pkg/fence refuses: %v (%+v)", err, in))
	}
	b := Body{
		Object:  u.Object,
		Subject: Subject{Namespace: in.Namespace, LabelKey: in.LabelKey, Owner: in.Owner.Name},
		Hosts:   in.Hosts,
		Update:  g.rng.IntN(4) == 0,
		Base:    runtime.DeepCopyJSON(u.Object),
	}
	n := []int{0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3}[g.rng.IntN(20)]
	// Two bodies in five draw only from changes the fence should admit, so
	// that the property is tested on many admitted shapes, not a few.
	cat := catalogue
	if g.rng.IntN(5) < 2 {
		cat = admitCatalogue
	}
	for range n {
		for range 16 { // a mutation may not apply to what earlier ones left
			m := g.pickMutation(cat)
			if m.apply(g, b.Object) {
				b.Mutations = append(b.Mutations, m.name)
				break
			}
		}
	}
	return b
}

func pick[T any](rng *rand.Rand, xs ...T) T { return xs[rng.IntN(len(xs))] }

// --- inputs of the host's body -------------------------------------------

const (
	lower  = "abcdefghijklmnopqrstuvwxyz"
	digits = "0123456789"
)

func (g *Generator) ownerName() string {
	switch g.rng.IntN(6) {
	case 0:
		return "a"
	case 1:
		return randString(g.rng, lower+digits, 63)
	case 2:
		return "ws_" + randString(g.rng, lower, 4) + ".v2-" + randString(g.rng, digits, 2)
	case 3:
		return "Claim-" + randString(g.rng, lower+digits, 1+g.rng.IntN(10))
	}
	return "claim-" + randString(g.rng, lower+digits, 1+g.rng.IntN(12))
}

func (g *Generator) uid() string {
	h := func(n int) string { return randString(g.rng, digits+"abcdef", n) }
	return h(8) + "-" + h(4) + "-4" + h(3) + "-8" + h(3) + "-" + h(12)
}

func randString(rng *rand.Rand, alphabet string, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return string(b)
}

// label is a label of the contract's grammar: letters and digits, inner
// hyphens, 1-63 characters.
func (g *Generator) label() string {
	n := 1 + g.rng.IntN(10)
	switch g.rng.IntN(12) {
	case 0:
		n = 63
	case 1:
		n = 1
	}
	b := []byte(randString(g.rng, lower+digits+"-", n))
	b[0] = pick(g.rng, []byte(lower+digits)...)
	b[n-1] = pick(g.rng, []byte(lower+digits)...)
	return string(b)
}

// domain is a host of the grammar: 1-4 labels (2-4 when a leading-dot entry
// needs two), the last not all digits, at most 253 characters.
func (g *Generator) domain(minLabels int) string {
	for {
		n := minLabels + g.rng.IntN(4-minLabels+1)
		ls := make([]string, n)
		for i := range ls {
			ls[i] = g.label()
		}
		ls[n-1] = notAllDigits(ls[n-1])
		if d := strings.Join(ls, "."); len(d) <= 253 {
			return d
		}
	}
}

// notAllDigits makes a last label the grammar accepts: an all-digit one ends
// in x instead of its last digit. Replacing, not appending, keeps a label of
// 63 within DNS's bound (appending made a 64-character label, which
// pkg/fence refuses; make fuzz found it).
func notAllDigits(label string) string {
	if strings.Trim(label, digits) != "" {
		return label
	}
	return label[:len(label)-1] + "x"
}

func (g *Generator) hosts() []string {
	fixed := []string{"registry.npmjs.org", "api.github.com", ".example.com", "pypi.org", ".googleapis.com", "a.co", "xn--bcher-kva.example", ".co.uk"}
	n := 1 + g.rng.IntN(6)
	out := make([]string, n)
	for i := range out {
		switch g.rng.IntN(4) {
		case 0:
			out[i] = pick(g.rng, fixed...)
		case 1:
			out[i] = "." + g.domain(2)
		case 2:
			out[i] = strings.ToUpper(g.domain(1)) // the host lowercases: the fence admits lowercase names only
		default:
			out[i] = g.domain(1)
		}
	}
	return out
}

// --- navigating a body ---------------------------------------------------

func obj(m map[string]any, key string) map[string]any {
	v, _ := m[key].(map[string]any)
	return v
}

func list(m map[string]any, key string) []any {
	v, _ := m[key].([]any)
	return v
}

func spec(b map[string]any) map[string]any { return obj(b, "spec") }

func egress(b map[string]any) []any { return list(spec(b), "egress") }

// rules returns the indexes of the egress rules that have key.
func rulesWith(b map[string]any, key string) []int {
	var out []int
	for i, r := range egress(b) {
		if m, ok := r.(map[string]any); ok {
			if _, ok := m[key]; ok {
				out = append(out, i)
			}
		}
	}
	return out
}

// ruleWith picks one egress rule that has key.
func (g *Generator) ruleWith(b map[string]any, key string) map[string]any {
	idx := rulesWith(b, key)
	if len(idx) == 0 {
		return nil
	}
	r, _ := egress(b)[pick(g.rng, idx...)].(map[string]any)
	return r
}

func (g *Generator) anyRule(b map[string]any) map[string]any {
	eg := egress(b)
	if len(eg) == 0 {
		return nil
	}
	r, _ := eg[g.rng.IntN(len(eg))].(map[string]any)
	return r
}

func appendEgress(b map[string]any, rules ...any) bool {
	s := spec(b)
	if s == nil {
		return false
	}
	s["egress"] = append(list(s, "egress"), rules...)
	return true
}

func firstDomain(b map[string]any) string {
	for _, r := range egress(b) {
		if m, ok := r.(map[string]any); ok {
			for _, f := range list(m, "toFQDNs") {
				if e, ok := f.(map[string]any); ok {
					if n, ok := e["matchName"].(string); ok && n != "" {
						return n
					}
				}
			}
		}
	}
	return "example.com"
}

// --- the catalogue -------------------------------------------------------

type mutation struct {
	name   string
	weight int
	apply  func(g *Generator, b map[string]any) bool
}

func (g *Generator) pickMutation(cat []mutation) mutation {
	total := 0
	for _, m := range cat {
		total += m.weight
	}
	n := g.rng.IntN(total)
	for _, m := range cat {
		if n < m.weight {
			return m
		}
		n -= m.weight
	}
	panic("unreachable")
}

// Catalogues lists both catalogues, for checks that every mutation ran.
func Catalogues() [][]mutation { return [][]mutation{catalogue, admitCatalogue} }

// set makes a mutation that sets key of the object at path to value.
func setAt(name string, weight int, path []string, key string, value func(g *Generator, b map[string]any) any) mutation {
	return mutation{name, weight, func(g *Generator, b map[string]any) bool {
		m := b
		for _, p := range path {
			if m = obj(m, p); m == nil {
				return false
			}
		}
		m[key] = value(g, b)
		return true
	}}
}

func constant(v any) func(*Generator, map[string]any) any {
	return func(*Generator, map[string]any) any { return runtime.DeepCopyJSONValue(v) }
}

// onRule makes a mutation of one egress rule that has key ("" = any rule).
func onRule(name string, weight int, key string, f func(g *Generator, b, r map[string]any) bool) mutation {
	return mutation{name, weight, func(g *Generator, b map[string]any) bool {
		var r map[string]any
		if key == "" {
			r = g.anyRule(b)
		} else {
			r = g.ruleWith(b, key)
		}
		return r != nil && f(g, b, r)
	}}
}

// onPortRule makes a mutation of one toPorts entry of a rule that has key,
// adding one (ports 443) when the rule has none.
func onPortRule(name string, weight int, key string, f func(g *Generator, b, pr map[string]any) bool) mutation {
	return onRule(name, weight, key, func(g *Generator, b, r map[string]any) bool {
		tp := list(r, "toPorts")
		if len(tp) == 0 {
			tp = []any{map[string]any{"ports": []any{map[string]any{"port": "443"}}}}
			r["toPorts"] = tp
		}
		pr, ok := tp[g.rng.IntN(len(tp))].(map[string]any)
		return ok && f(g, b, pr)
	})
}

// fqdnNameForms are matchName values around a domain: the canonical form
// the fence admits, and every near miss.
func fqdnNameForms(g *Generator, d string) []any {
	return []any{
		d, g.domain(1), strings.ToUpper(d), d + ".", "." + d, "_x." + d, "-x." + d, "x-." + d,
		strings.Repeat("a", 64) + "." + d, "a.123", "10.0.0.1", "::1", "*", "*." + d, "", " " + d, d + " ",
		"a.." + d, "exämple.com", strings.Repeat("a.", 126) + "bc", strings.Repeat("a.", 127) + "bc", "localhost", "x_y." + d,
		"0x10." + d, "a\\.b." + d, "123abc", "a-.b",
	}
}

// fqdnPatternForms are matchPattern values: every wildcard form Cilium
// knows (*, **, ***, **., *x, x*, interior stars) and the near misses of
// the one form the fence admits, *.<domain>.
func fqdnPatternForms(g *Generator, d string) []any {
	return []any{
		"*." + d, "*." + g.domain(2), "*", "**", "***", "*.", "**.", "**." + d, "***." + d, "*.*." + d, "*" + d,
		"sub*." + d, "a.*." + d, "*.com", "*." + d + ".", "*." + strings.ToUpper(d), " *." + d, "*.-a.com",
		"*.a.123", "*.*", d, "*." + strings.Repeat("a", 64) + ".com", "*.." + d, "?." + d, "*.localhost",
		"*.co.uk", "*_." + d, "*-*." + d, "*.x_y." + d, "*" + "." + "10.0.0.1",
	}
}

func fqdnEntry(g *Generator, d string) any {
	switch g.rng.IntN(14) {
	case 10, 11:
		return map[string]any{"matchName": g.domain(1)}
	case 12, 13:
		return map[string]any{"matchPattern": "*." + g.domain(2)}
	case 0:
		return map[string]any{"matchName": pick(g.rng, fqdnNameForms(g, d)...), "matchPattern": pick(g.rng, fqdnPatternForms(g, d)...)}
	case 1:
		return map[string]any{}
	case 2:
		return map[string]any{"matchName": d, "extra": "x"}
	case 3, 4, 5:
		return map[string]any{"matchName": pick(g.rng, fqdnNameForms(g, d)...)}
	}
	return map[string]any{"matchPattern": pick(g.rng, fqdnPatternForms(g, d)...)}
}

func dnsRuleEntry(g *Generator, d string) any {
	if g.rng.IntN(3) == 0 {
		return map[string]any{"matchPattern": pick[any](g.rng, "*", "*."+d, "**."+d, "**", "*"+d)}
	}
	return fqdnEntry(g, d)
}

var portForms = []any{
	map[string]any{"port": "443"},
	map[string]any{"port": "443", "protocol": "TCP"},
	map[string]any{"port": "53", "protocol": "UDP"},
	map[string]any{"port": "53", "protocol": "ANY"},
	map[string]any{"port": "8000", "endPort": int64(8100), "protocol": "TCP"},
	map[string]any{"port": "1", "endPort": int64(65535)},
	map[string]any{"port": "65535"},
	map[string]any{"port": "65536"},
	map[string]any{"port": "0"},
	map[string]any{"port": "0", "protocol": "ANY"},
	map[string]any{"port": "https"},
	map[string]any{"port": "0x1bb"},
	map[string]any{"port": "0443"},
	map[string]any{"port": "443", "endPort": int64(80)},
	map[string]any{"port": "443", "protocol": "SCTP"},
	map[string]any{"port": "443", "protocol": "tcp"},
	map[string]any{"port": "443", "protocol": "ICMP"},
	map[string]any{"port": "443", "protocol": "VRRP"},
	map[string]any{"protocol": "TCP"},
	map[string]any{"port": "443", "extra": "x"},
	map[string]any{"port": "53", "endPort": int64(54)},
	map[string]any{"port": "53", "endPort": int64(53)},
}

var dnsPortForms = []any{
	map[string]any{"port": "53", "protocol": "ANY"},
	map[string]any{"port": "53", "protocol": "UDP"},
	map[string]any{"port": "53", "protocol": "TCP"},
	map[string]any{"port": "53"},
	map[string]any{"port": "53", "protocol": "SCTP"},
	map[string]any{"port": "5353", "protocol": "UDP"},
	map[string]any{"port": "0", "protocol": "ANY"},
	map[string]any{"port": "dns", "protocol": "UDP"},
	map[string]any{"port": "053"},
	map[string]any{"port": "53", "endPort": int64(53)},
	map[string]any{"port": "53", "endPort": int64(65535)},
	map[string]any{"port": "1", "endPort": int64(53)},
	map[string]any{"protocol": "UDP"},
}

var peerForms = []any{
	map[string]any{"toEntities": []any{"world"}},
	map[string]any{"toEntities": []any{"all"}},
	map[string]any{"toEntities": []any{"cluster"}},
	map[string]any{"toEntities": []any{"kube-apiserver"}},
	map[string]any{"toEntities": []any{"host"}},
	map[string]any{"toCIDR": []any{"0.0.0.0/0"}},
	map[string]any{"toCIDR": []any{"169.254.169.254/32"}},
	map[string]any{"toCIDRSet": []any{map[string]any{"cidr": "10.0.0.0/8", "except": []any{"10.1.0.0/16"}}}},
	map[string]any{"toServices": []any{map[string]any{"k8sService": map[string]any{"serviceName": "kubernetes", "namespace": "default"}}}},
	map[string]any{"toGroups": []any{map[string]any{"aws": map[string]any{"securityGroupsIds": []any{"sg-1"}}}}},
	map[string]any{"toNodes": []any{map[string]any{}}},
	map[string]any{"toEndpoints": []any{map[string]any{}}},
	map[string]any{"toEndpoints": []any{map[string]any{"matchLabels": map[string]any{"app": "db"}}}},
	map[string]any{"toPorts": []any{map[string]any{"ports": []any{map[string]any{"port": "443"}}}}},
	map[string]any{},
	map[string]any{"icmps": []any{map[string]any{"fields": []any{map[string]any{"type": int64(8)}}}}},
	map[string]any{"toRequires": []any{map[string]any{"matchLabels": map[string]any{"app": "x"}}}},
	map[string]any{"toFQDNs": []any{map[string]any{"matchPattern": "*"}}},
	map[string]any{"toFQDNs": []any{map[string]any{"matchPattern": "*.evil.com"}}, "toPorts": []any{map[string]any{"ports": []any{map[string]any{"port": "443"}}}}},
	map[string]any{"authentication": map[string]any{"mode": "required"}, "toFQDNs": []any{map[string]any{"matchName": "a.example.com"}}},
}

var kubeDNSLabels = map[string]any{"k8s:io.kubernetes.pod.namespace": "kube-system", "k8s:k8s-app": "kube-dns"}

var toEndpointsForms = []any{
	map[string]any{"matchLabels": kubeDNSLabels},
	map[string]any{"matchLabels": map[string]any{"k8s:io.kubernetes.pod.namespace": "sbx", "k8s:k8s-app": "kube-dns"}},
	map[string]any{"matchLabels": map[string]any{"k8s:k8s-app": "kube-dns"}},
	map[string]any{"matchLabels": map[string]any{"k8s:io.kubernetes.pod.namespace": "kube-system"}},
	map[string]any{"matchLabels": map[string]any{"io.kubernetes.pod.namespace": "kube-system", "k8s-app": "kube-dns"}},
	map[string]any{"matchLabels": map[string]any{"any:io.kubernetes.pod.namespace": "kube-system", "any:k8s-app": "kube-dns"}},
	map[string]any{"matchLabels": map[string]any{"k8s:io.kubernetes.pod.namespace": "kube-system", "k8s:k8s-app": "kube-dns", "k8s:io.cilium.k8s.policy.cluster": "default"}},
	map[string]any{"matchLabels": map[string]any{"k8s:io.kubernetes.pod.namespace": "kube-system", "k8s:k8s-app": "kube-dns", "k8s:io.cilium.k8s.policy.cluster": "other"}},
	map[string]any{"matchLabels": kubeDNSLabels, "matchExpressions": []any{map[string]any{"key": "k8s:k8s-app", "operator": "Exists"}}},
	map[string]any{"matchExpressions": []any{map[string]any{"key": "k8s:k8s-app", "operator": "In", "values": []any{"kube-dns", "metrics-server"}}}},
	map[string]any{},
	map[string]any{"matchLabels": map[string]any{"reserved:host": ""}},
}

var catalogue = []mutation{
	// metadata
	setAt("metadata.name: another prefix", 2, []string{"metadata"}, "name", func(g *Generator, b map[string]any) any {
		return pick[any](g.rng, "baseline-deny", "namzu-sbx", "namzu-sbx-"+g.uid(), "Namzu-sbx-x", "")
	}),
	mutation{"metadata.name: generateName only", 1, func(g *Generator, b map[string]any) bool {
		m := obj(b, "metadata")
		delete(m, "name")
		m["generateName"] = "namzu-sbx-"
		return true
	}},
	mutation{"metadata.ownerReferences: removed or emptied", 2, func(g *Generator, b map[string]any) bool {
		if g.rng.IntN(2) == 0 {
			delete(obj(b, "metadata"), "ownerReferences")
		} else {
			obj(b, "metadata")["ownerReferences"] = []any{}
		}
		return true
	}},
	mutation{"metadata.ownerReferences: a second owner", 2, func(g *Generator, b map[string]any) bool {
		m := obj(b, "metadata")
		refs := list(m, "ownerReferences")
		if len(refs) == 0 {
			return false
		}
		second := runtime.DeepCopyJSONValue(refs[0]).(map[string]any)
		if g.rng.IntN(2) == 0 {
			second["uid"] = g.uid()
			second["name"] = "other"
		}
		m["ownerReferences"] = append(refs, second)
		return true
	}},
	onOwner("metadata.ownerReferences[0]: controller", 3, func(g *Generator, o map[string]any) { o["controller"] = g.rng.IntN(2) == 0 }),
	onOwner("metadata.ownerReferences[0]: blockOwnerDeletion", 3, func(g *Generator, o map[string]any) { o["blockOwnerDeletion"] = g.rng.IntN(2) == 0 }),
	onOwner("metadata.ownerReferences[0]: kind and apiVersion", 2, func(g *Generator, o map[string]any) {
		o["kind"] = pick(g.rng, "SandboxClaim", "Sandbox", "Pod", "sandboxclaim")
		o["apiVersion"] = pick(g.rng, "extensions.agents.x-k8s.io/v1beta1", "agents.x-k8s.io/v1beta1", "agents.x-k8s.io/v1alpha1", "v1")
	}),
	onOwner("metadata.ownerReferences[0]: uid", 1, func(g *Generator, o map[string]any) { o["uid"] = pick[any](g.rng, "", g.uid()) }),
	onOwner("metadata.ownerReferences[0]: name", 3, func(g *Generator, o map[string]any) {
		o["name"] = pick[any](g.rng, "other", "-bad", "bad-", strings.Repeat("a", 64), "a b", "", "a/b", "ws.1_x")
	}),
	onOwner("metadata.ownerReferences[0]: an extra key", 1, func(g *Generator, o map[string]any) { o["extra"] = "x" }),
	setAt("metadata.finalizers", 2, []string{"metadata"}, "finalizers", func(g *Generator, b map[string]any) any {
		return pick[any](g.rng, []any{}, []any{"example.com/keep"})
	}),
	setAt("metadata.labels", 3, []string{"metadata"}, "labels", constant(map[string]any{"app": "x", "io.cilium.k8s.policy.name": "other"})),
	setAt("metadata.annotations", 3, []string{"metadata"}, "annotations", constant(map[string]any{"note": "x"})),

	// specs, and spec members other than endpointSelector and egress
	mutation{"specs: a second rule list", 2, func(g *Generator, b map[string]any) bool {
		s := spec(b)
		if s == nil {
			return false
		}
		other := runtime.DeepCopyJSON(s)
		switch g.rng.IntN(3) {
		case 0:
			other["egress"] = []any{runtime.DeepCopyJSONValue(pick(g.rng, peerForms...))}
		case 1:
			other["endpointSelector"] = map[string]any{"matchLabels": map[string]any{}}
		}
		b["specs"] = []any{other}
		if g.rng.IntN(3) == 0 {
			delete(b, "spec")
		}
		return true
	}},
	mutation{"specs: empty", 1, func(g *Generator, b map[string]any) bool { b["specs"] = []any{}; return true }},
	mutation{"spec: removed", 1, func(g *Generator, b map[string]any) bool { delete(b, "spec"); return true }},
	setAt("spec.ingress", 2, []string{"spec"}, "ingress", func(g *Generator, b map[string]any) any {
		return pick[any](g.rng, []any{map[string]any{"fromEntities": []any{"world"}}}, []any{}, []any{map[string]any{}})
	}),
	setAt("spec.ingressDeny", 1, []string{"spec"}, "ingressDeny", constant([]any{map[string]any{"fromEntities": []any{"world"}}})),
	setAt("spec.egressDeny", 2, []string{"spec"}, "egressDeny", func(g *Generator, b map[string]any) any {
		return pick[any](g.rng, []any{map[string]any{"toEntities": []any{"world"}}}, []any{map[string]any{"toPorts": []any{map[string]any{"ports": []any{map[string]any{"port": "25"}}}}}})
	}),
	setAt("spec.nodeSelector", 1, []string{"spec"}, "nodeSelector", constant(map[string]any{"matchLabels": map[string]any{"x": "y"}})),
	setAt("spec.enableDefaultDeny", 2, []string{"spec"}, "enableDefaultDeny", func(g *Generator, b map[string]any) any {
		return pick[any](g.rng, map[string]any{"egress": false}, map[string]any{"ingress": false}, map[string]any{"egress": true})
	}),
	setAt("spec.labels", 1, []string{"spec"}, "labels", constant([]any{map[string]any{"key": "a", "value": "b", "source": "k8s"}})),
	setAt("spec.description", 1, []string{"spec"}, "description", constant("x")),
	setAt("spec.log", 1, []string{"spec"}, "log", constant(map[string]any{"value": "x"})),
	mutation{"spec.endpointSelector: removed", 1, func(g *Generator, b map[string]any) bool {
		s := spec(b)
		if s == nil {
			return false
		}
		delete(s, "endpointSelector")
		return true
	}},

	// endpointSelector
	mutation{"spec.endpointSelector: changed", 6, func(g *Generator, b map[string]any) bool {
		es := obj(spec(b), "endpointSelector")
		if es == nil {
			return false
		}
		ml := obj(es, "matchLabels")
		if len(ml) == 0 {
			return false
		}
		key := slices.Sorted(maps.Keys(ml))[0]
		val := fmt.Sprint(ml[key])
		switch g.rng.IntN(10) {
		case 0:
			ml["app"] = "agent"
		case 1:
			es["matchExpressions"] = []any{map[string]any{"key": key, "operator": pick(g.rng, "Exists", "In", "NotIn", "DoesNotExist"), "values": []any{val}}}
		case 2:
			ml[key] = val + "x"
		case 3:
			delete(ml, key)
			ml["k8s:"+key] = val
		case 4:
			delete(ml, key)
			ml["any:"+key] = val
		case 5:
			delete(ml, key)
			ml["sandbox.namzu.ai/template"] = val
		case 6:
			es["matchLabels"] = map[string]any{}
		case 7:
			delete(es, "matchLabels")
		case 8:
			ml["k8s:io.kubernetes.pod.namespace"] = pick(g.rng, "kube-system", g.Namespace)
		default:
			ml[key] = strings.ToUpper(val)
		}
		return true
	}},

	// egress as a whole
	mutation{"spec.egress: emptied or removed", 1, func(g *Generator, b map[string]any) bool {
		s := spec(b)
		if s == nil {
			return false
		}
		if g.rng.IntN(2) == 0 {
			s["egress"] = []any{}
		} else {
			delete(s, "egress")
		}
		return true
	}},
	mutation{"spec.egress: another peer kind", 8, func(g *Generator, b map[string]any) bool {
		return appendEgress(b, runtime.DeepCopyJSONValue(pick(g.rng, peerForms...)))
	}},
	mutation{"spec.egress: another toFQDNs rule", 5, func(g *Generator, b map[string]any) bool {
		d := g.domain(2)
		r := map[string]any{"toFQDNs": []any{fqdnEntry(g, d)}}
		if g.rng.IntN(2) == 0 {
			r["toFQDNs"] = []any{map[string]any{"matchName": d}, map[string]any{"matchPattern": "*." + d}}
		}
		return appendEgress(b, r)
	}},
	mutation{"spec.egress: a rule duplicated", 3, func(g *Generator, b map[string]any) bool {
		r := g.anyRule(b)
		return r != nil && appendEgress(b, runtime.DeepCopyJSON(r))
	}},
	mutation{"spec.egress: rules reordered", 2, func(g *Generator, b map[string]any) bool {
		eg := egress(b)
		if len(eg) < 2 {
			return false
		}
		g.rng.Shuffle(len(eg), func(i, j int) { eg[i], eg[j] = eg[j], eg[i] })
		return true
	}},
	mutation{"spec.egress: the kube-dns rule removed", 2, func(g *Generator, b map[string]any) bool {
		return removeRules(b, "toEndpoints")
	}},
	mutation{"spec.egress: the toFQDNs rule removed", 1, func(g *Generator, b map[string]any) bool {
		return removeRules(b, "toFQDNs")
	}},
	mutation{"spec.egress: toFQDNs split into one rule per entry", 3, func(g *Generator, b map[string]any) bool {
		s := spec(b)
		var out []any
		split := false
		for _, r := range egress(b) {
			m, ok := r.(map[string]any)
			if fs := list(m, "toFQDNs"); ok && len(fs) > 1 {
				split = true
				for _, f := range fs {
					n := runtime.DeepCopyJSON(m)
					n["toFQDNs"] = []any{f}
					out = append(out, n)
				}
				continue
			}
			out = append(out, r)
		}
		if split {
			s["egress"] = out
		}
		return split
	}},

	// the kube-dns rule
	onRule("kube-dns rule: toEndpoints entry", 6, "toEndpoints", func(g *Generator, b, r map[string]any) bool {
		te := list(r, "toEndpoints")
		form := runtime.DeepCopyJSONValue(pick(g.rng, toEndpointsForms...))
		if len(te) == 0 || g.rng.IntN(3) == 0 {
			r["toEndpoints"] = append(te, form)
		} else {
			te[g.rng.IntN(len(te))] = form
		}
		return true
	}),
	onRule("kube-dns rule: toEndpoints emptied", 1, "toEndpoints", func(g *Generator, b, r map[string]any) bool {
		r["toEndpoints"] = []any{}
		return true
	}),
	toPortsRemoved("kube-dns rule: toPorts removed or emptied", 2, "toEndpoints"),
	portMutation("kube-dns rule: a port", 8, "toEndpoints", dnsPortForms),
	onPortRule("kube-dns rule: rules.dns", 8, "toEndpoints", func(g *Generator, b, pr map[string]any) bool {
		d := firstDomain(b)
		switch g.rng.IntN(8) {
		case 0:
			delete(pr, "rules")
		case 1:
			pr["rules"] = map[string]any{"dns": []any{}}
		case 2:
			pr["rules"] = map[string]any{}
		case 3:
			pr["rules"] = map[string]any{"http": []any{map[string]any{"method": "GET"}}}
		case 4:
			pr["rules"] = map[string]any{"dns": []any{map[string]any{"matchPattern": "*"}}, "http": []any{map[string]any{}}}
		default:
			pr["rules"] = map[string]any{"dns": []any{dnsRuleEntry(g, d), dnsRuleEntry(g, d)}[:1+g.rng.IntN(2)]}
		}
		return true
	}),
	onPortRule("kube-dns rule: serverNames, listener or TLS", 2, "toEndpoints", func(g *Generator, b, pr map[string]any) bool {
		addPortExtras(g, pr)
		return true
	}),
	peerInSameRule("kube-dns rule: another peer in the same rule", 3, "toEndpoints"),

	// the toFQDNs rule
	onRule("toFQDNs rule: an entry in every wildcard form", 14, "toFQDNs", func(g *Generator, b, r map[string]any) bool {
		fs := list(r, "toFQDNs")
		e := fqdnEntry(g, firstDomain(b))
		if len(fs) == 0 || g.rng.IntN(2) == 0 {
			r["toFQDNs"] = append(fs, e)
		} else {
			fs[g.rng.IntN(len(fs))] = e
		}
		return true
	}),
	mutation{"spec.egress: the narrowing mode, one rule per host", 6, narrowingMode(true)},
	onRule("toFQDNs rule: emptied", 1, "toFQDNs", func(g *Generator, b, r map[string]any) bool {
		r["toFQDNs"] = []any{}
		return true
	}),
	portMutation("toFQDNs rule: a port", 10, "toFQDNs", portForms),
	onPortRule("toFQDNs rule: serverNames", 6, "toFQDNs", func(g *Generator, b, pr map[string]any) bool {
		d := firstDomain(b)
		pr["serverNames"] = []any{pick[any](g.rng, d, "*."+d, "**."+d, "", strings.ToUpper(d), "*", d+".", "10.0.0.1")}
		return true
	}),
	onPortRule("toFQDNs rule: rules.dns", 6, "toFQDNs", func(g *Generator, b, pr map[string]any) bool {
		d := firstDomain(b)
		switch g.rng.IntN(6) {
		case 0:
			pr["rules"] = map[string]any{}
		case 1:
			pr["rules"] = map[string]any{"http": []any{map[string]any{"method": "GET", "path": "/"}}}
		default:
			pr["rules"] = map[string]any{"dns": []any{dnsRuleEntry(g, d)}}
		}
		return true
	}),
	onPortRule("toFQDNs rule: listener, TLS or an extra key", 3, "toFQDNs", func(g *Generator, b, pr map[string]any) bool {
		addPortExtras(g, pr)
		return true
	}),
	toPortsRemoved("toFQDNs rule: toPorts removed or emptied", 2, "toFQDNs"),
	peerInSameRule("toFQDNs rule: another peer in the same rule", 4, "toFQDNs"),
	onRule("egress rule: icmps or authentication", 2, "", func(g *Generator, b, r map[string]any) bool {
		if g.rng.IntN(2) == 0 {
			r["icmps"] = []any{map[string]any{"fields": []any{map[string]any{"type": int64(8)}}}}
		} else {
			r["authentication"] = map[string]any{"mode": "required"}
		}
		return true
	}),
}

// narrowingMode rewrites the toFQDNs rules as the host's optional
// narrowing mode: one rule per entry, toPorts 443/TCP with serverNames or
// rules.dns limited to that entry, or (withBoth) sometimes both, which
// Cilium v1.20 refuses.
func narrowingMode(withBoth bool) func(g *Generator, b map[string]any) bool {
	return func(g *Generator, b map[string]any) bool {
		s := spec(b)
		if s == nil {
			return false
		}
		var out []any
		for _, r := range egress(b) {
			m, ok := r.(map[string]any)
			fs := list(m, "toFQDNs")
			if !ok || len(fs) == 0 {
				out = append(out, r)
				continue
			}
			for _, f := range fs {
				e, _ := f.(map[string]any)
				name, _ := e["matchName"].(string)
				if name == "" {
					name, _ = e["matchPattern"].(string)
				}
				pr := map[string]any{"ports": []any{map[string]any{"port": "443", "protocol": "TCP"}}}
				choices := 4
				if withBoth {
					choices = 5
				}
				switch g.rng.IntN(choices) {
				case 0, 1:
					pr["serverNames"] = []any{name}
				case 2, 3:
					pr["rules"] = map[string]any{"dns": []any{runtime.DeepCopyJSONValue(f)}}
				default:
					pr["serverNames"] = []any{name}
					pr["rules"] = map[string]any{"dns": []any{runtime.DeepCopyJSONValue(f)}}
				}
				out = append(out, map[string]any{"toFQDNs": []any{runtime.DeepCopyJSONValue(f)}, "toPorts": []any{pr}})
			}
		}
		s["egress"] = out
		return len(out) <= 16
	}
}

// portMutation adds a port of forms to, or replaces one in, a toPorts
// entry of a rule that has key.
func portMutation(name string, weight int, key string, forms []any) mutation {
	return onPortRule(name, weight, key, func(g *Generator, b, pr map[string]any) bool {
		p := runtime.DeepCopyJSONValue(pick(g.rng, forms...))
		ports := list(pr, "ports")
		if len(ports) == 0 || g.rng.IntN(3) == 0 {
			pr["ports"] = append(ports, p)
		} else {
			ports[g.rng.IntN(len(ports))] = p
		}
		return true
	})
}

// toPortsRemoved drops or empties toPorts of a rule that has key.
func toPortsRemoved(name string, weight int, key string) mutation {
	return onRule(name, weight, key, func(g *Generator, b, r map[string]any) bool {
		if g.rng.IntN(2) == 0 {
			delete(r, "toPorts")
		} else {
			r["toPorts"] = []any{}
		}
		return true
	})
}

// peerInSameRule adds another peer kind's members to a rule that has key.
func peerInSameRule(name string, weight int, key string) mutation {
	return onRule(name, weight, key, func(g *Generator, b, r map[string]any) bool {
		for k, v := range pick(g.rng, peerForms...).(map[string]any) {
			if k != key && k != "toPorts" {
				r[k] = runtime.DeepCopyJSONValue(v)
			}
		}
		return true
	})
}

func onOwner(name string, weight int, f func(g *Generator, o map[string]any)) mutation {
	return mutation{name, weight, func(g *Generator, b map[string]any) bool {
		refs := list(obj(b, "metadata"), "ownerReferences")
		if len(refs) == 0 {
			return false
		}
		o, ok := refs[0].(map[string]any)
		if ok {
			f(g, o)
		}
		return ok
	}}
}

func removeRules(b map[string]any, key string) bool {
	s := spec(b)
	var out []any
	for _, r := range egress(b) {
		if m, ok := r.(map[string]any); ok {
			if _, has := m[key]; has {
				continue
			}
		}
		out = append(out, r)
	}
	if len(out) == len(egress(b)) || len(out) == 0 {
		return false
	}
	s["egress"] = out
	return true
}

func addPortExtras(g *Generator, pr map[string]any) {
	switch g.rng.IntN(5) {
	case 0:
		pr["listener"] = map[string]any{"envoyConfig": map[string]any{"kind": "CiliumEnvoyConfig", "name": "x"}, "name": "l"}
	case 1:
		pr["terminatingTLS"] = map[string]any{"secret": map[string]any{"name": "s"}}
	case 2:
		pr["originatingTLS"] = map[string]any{"secret": map[string]any{"name": "s"}}
	case 3:
		pr["serverNames"] = []any{"api.example.com"}
	default:
		pr["extra"] = "x"
	}
}

// admitCatalogue holds changes within what the fence admits from a bound
// host: other valid values in every place the fence allows a choice, and
// rearrangements of valid rules. Most bodies built from it are admitted, so the property
// is checked on many admitted shapes.
var admitCatalogue = []mutation{
	setAt("valid: metadata.labels", 1, []string{"metadata"}, "labels", constant(map[string]any{"app": "x"})),
	setAt("valid: metadata.annotations", 1, []string{"metadata"}, "annotations", constant(map[string]any{"note": "x"})),
	setAt("valid: metadata.finalizers empty", 1, []string{"metadata"}, "finalizers", constant([]any{})),
	onOwner("valid: ownerReferences[0] controller and blockOwnerDeletion false", 1, func(g *Generator, o map[string]any) {
		o[pick(g.rng, "controller", "blockOwnerDeletion")] = false
	}),
	mutation{"valid: another toFQDNs rule", 3, func(g *Generator, b map[string]any) bool {
		d := g.domain(2)
		return appendEgress(b, map[string]any{"toFQDNs": []any{map[string]any{"matchName": d}, map[string]any{"matchPattern": "*." + d}}})
	}},
	mutation{"valid: the narrowing mode", 3, narrowingMode(false)},
	mutation{"valid: a rule duplicated", 1, func(g *Generator, b map[string]any) bool {
		r := g.anyRule(b)
		return r != nil && appendEgress(b, runtime.DeepCopyJSON(r))
	}},
	mutation{"valid: the kube-dns rule removed", 1, func(g *Generator, b map[string]any) bool { return removeRules(b, "toEndpoints") }},
	mutation{"valid: the toFQDNs rule removed", 1, func(g *Generator, b map[string]any) bool { return removeRules(b, "toFQDNs") }},
	onRule("valid: a toFQDNs entry", 4, "toFQDNs", func(g *Generator, b, r map[string]any) bool {
		e := map[string]any{"matchName": g.domain(1)}
		if g.rng.IntN(2) == 0 {
			e = map[string]any{"matchPattern": "*." + g.domain(2)}
		}
		r["toFQDNs"] = append(list(r, "toFQDNs"), e)
		return true
	}),
	onPortRule("valid: a toFQDNs port", 4, "toFQDNs", func(g *Generator, b, pr map[string]any) bool {
		p := pick[any](g.rng, map[string]any{"port": "443"}, map[string]any{"port": "443", "protocol": "TCP"}, map[string]any{"port": "53", "protocol": "UDP"},
			map[string]any{"port": "8443", "protocol": "ANY"}, map[string]any{"port": "8000", "endPort": int64(8100), "protocol": "TCP"},
			map[string]any{"port": "1", "endPort": int64(65535)}, map[string]any{"port": "65535"}, map[string]any{"port": "443", "endPort": int64(443)})
		pr["ports"] = append(list(pr, "ports"), p)
		return true
	}),
	onPortRule("valid: toFQDNs serverNames", 3, "toFQDNs", func(g *Generator, b, pr map[string]any) bool {
		d := firstDomain(b)
		pr["serverNames"] = []any{pick[any](g.rng, d, "*."+d, g.domain(1))}
		return true
	}),
	onPortRule("valid: toFQDNs rules.dns", 3, "toFQDNs", func(g *Generator, b, pr map[string]any) bool {
		d := firstDomain(b)
		pr["rules"] = map[string]any{"dns": []any{pick[any](g.rng, map[string]any{"matchName": d}, map[string]any{"matchPattern": "*." + d}, map[string]any{"matchName": g.domain(1)})}}
		return true
	}),
	onPortRule("valid: a kube-dns port", 3, "toEndpoints", func(g *Generator, b, pr map[string]any) bool {
		p := runtime.DeepCopyJSONValue(pick(g.rng, dnsPortForms[:4]...))
		if g.rng.IntN(2) == 0 {
			pr["ports"] = append(list(pr, "ports"), p)
		} else {
			pr["ports"] = []any{p}
		}
		return true
	}),
	onPortRule("valid: kube-dns rules.dns", 3, "toEndpoints", func(g *Generator, b, pr map[string]any) bool {
		d := firstDomain(b)
		switch g.rng.IntN(4) {
		case 0:
			delete(pr, "rules")
		case 1:
			pr["rules"] = map[string]any{"dns": []any{}}
		default:
			pr["rules"] = map[string]any{"dns": []any{pick[any](g.rng, map[string]any{"matchPattern": "*"}, map[string]any{"matchName": d}, map[string]any{"matchPattern": "*." + d})}}
		}
		return true
	}),
	onRule("valid: a second kube-dns selector or port entry", 1, "toEndpoints", func(g *Generator, b, r map[string]any) bool {
		if g.rng.IntN(2) == 0 {
			r["toEndpoints"] = append(list(r, "toEndpoints"), map[string]any{"matchLabels": runtime.DeepCopyJSONValue(kubeDNSLabels)})
		} else {
			r["toPorts"] = append(list(r, "toPorts"), map[string]any{"ports": []any{map[string]any{"port": "53", "protocol": "TCP"}}})
		}
		return true
	}),
}
