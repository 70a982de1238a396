// Package policyconfig renders a FenceConfig into the admission objects that
// enforce it: the `config` variable of the shipped ValidatingAdmissionPolicies
// and the bound-hosts match condition of the webhook configuration.
//
// Why rendered, not a paramKind: an API server resolves a policy's paramKind
// through a discovery-backed REST mapper that learns a CRD up to 30 s after
// it starts (or after the CRD is created), and until then the policy refuses
// everything it matches (kubernetes/kubernetes#124237). A policy that carries
// its configuration as a constant has nothing to resolve, so it enforces from
// the first request an API server serves. Admins still write only the typed,
// schema-validated FenceConfig; the controller in the webhook binary
// (Reconciler) keeps the objects rendered from it.
package policyconfig

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

const (
	// Variable is the policies' rendered variable: every policy that reads
	// configuration declares it first, with Unrendered's expression as
	// shipped.
	Variable = "config"
	// MatchCondition is the webhook configuration's rendered match
	// condition: it routes the bound hosts' writes, and no one else's.
	MatchCondition = "bound-hosts"
	// RenderLabel marks the policies the controller renders into; its value
	// is the name of the FenceConfig they are rendered from.
	RenderLabel = "fence.sandbox.namzu.ai/config"
	// FieldManager owns the rendered fields (server-side apply).
	FieldManager = "sandbox-fence-config"
)

// State says where the policies' configuration comes from.
type State string

const (
	// Unrendered is the shipped placeholder: no controller has rendered a
	// FenceConfig yet. The policies fail closed for every identity that may
	// be a host in opted-in namespaces, as for Missing.
	Unrendered State = "unrendered"
	// Missing: the FenceConfig does not exist.
	Missing State = "missing"
	// Invalid: the FenceConfig binds an identity the fence cannot verify
	// (kept from before the schema refused it); nothing of it is rendered.
	Invalid State = "invalid"
	// Rendered: the FenceConfig's spec is in force.
	Rendered State = "rendered"
)

// MaxExpressionSize is the most code points a CEL expression may have: the
// parser's default limit, which the API server keeps. The FenceConfig
// schema's bounds keep every valid configuration's rendering below it
// (TestTheLargestConfigurationRenders); one stored before those bounds
// (CRD validation ratcheting) that does not fit is Invalid.
const MaxExpressionSize = 100_000

// Config is the value of the policies' variables.config: what they read of
// a FenceConfig, plus its state.
type Config struct {
	State State
	// Name is the FenceConfig's name; Generation its metadata.generation.
	Name       string
	Generation int64
	// Reason says why an Invalid FenceConfig was not rendered.
	Reason string
	// Hosts maps each bound host's username to its listed namespaces
	// (none for a host bound by selector only).
	Hosts map[string][]string
	// Selectors maps the username of each host that has a namespace
	// selector to it.
	Selectors        map[string]*fencev1alpha1.NamespaceSelector
	LabelKey         string
	BreakGlassUsers  []string
	BreakGlassGroups []string
	StrictDelete     bool
}

// ShippedExpression is the expression the shipped policies declare for
// Variable: the Unrendered state.
var ShippedExpression = Config{State: Unrendered}.Expression()

// ShippedMatchCondition is the webhook configuration's shipped MatchCondition:
// every identity that may be a bound host (fencev1alpha1.VerifiableHost),
// writing a per-sandbox name. It is what an upgrade's apply, a Helm upgrade
// or a GitOps revert puts back over a rendered condition, and it is broader
// than any rendering: an API server takes up a webhook configuration at
// once but a policy only at its next refresh (up to a second later), so a
// placeholder narrower than the rendering would leave the still-rendered
// policy admitting a bound host's write that reaches no owner check. The
// webhook skips whoever the FenceConfig does not bind. A generated name is
// never a per-sandbox name (it carries a suffix), so a request without a
// name is no host's either.
var ShippedMatchCondition = "request.name.startsWith('" + fence.PolicyNamePrefix + "') && " +
	fencev1alpha1.VerifiableHostCEL("request.userInfo.username")

// RoutesNobody is the condition the controller renders while no host is
// bound (no hosts, a missing or an invalid FenceConfig): the egress policy
// refuses every ServiceAccount's writes in opted-in namespaces meanwhile.
const RoutesNobody = "false"

// FromFenceConfig is the Config the policies enforce for cfg; nil is Missing.
func FromFenceConfig(name string, cfg *fencev1alpha1.FenceConfig) Config {
	if cfg == nil {
		return Config{State: Missing, Name: name}
	}
	c := Config{
		State:            Rendered,
		Name:             name,
		Generation:       cfg.Generation,
		Hosts:            map[string][]string{},
		Selectors:        map[string]*fencev1alpha1.NamespaceSelector{},
		LabelKey:         cfg.Spec.PerSandboxLabelKey,
		BreakGlassUsers:  slices.Clone(cfg.Spec.BreakGlass.Users),
		BreakGlassGroups: slices.Clone(cfg.Spec.BreakGlass.Groups),
		StrictDelete:     cfg.Spec.StrictDelete,
	}
	if c.LabelKey == "" {
		// The CRD defaults it on every read; an empty key was read through
		// an older CRD.
		c.LabelKey = fence.DefaultPerSandboxLabelKey
	}
	var unverifiable []string
	for _, h := range cfg.Spec.Hosts {
		if !fencev1alpha1.VerifiableHost(h.Username) {
			unverifiable = append(unverifiable, strconv.Quote(h.Username))
			continue
		}
		c.Hosts[h.Username] = slices.Clone(h.Namespaces)
		if h.NamespaceSelector != nil {
			c.Selectors[h.Username] = h.NamespaceSelector.DeepCopy()
		}
	}
	if len(unverifiable) > 0 {
		return Config{State: Invalid, Name: name, Generation: cfg.Generation, Reason: fmt.Sprintf(
			"spec.hosts binds %s, which is no ServiceAccount outside kube-system: the webhook cannot verify such a host's owners "+
				"(contract §8.7); bind the host's ServiceAccount instead", strings.Join(unverifiable, ", "))}
	}
	if n := utf8.RuneCountInString(c.Expression()); n > MaxExpressionSize {
		return Config{State: Invalid, Name: name, Generation: cfg.Generation, Reason: fmt.Sprintf(
			"its rendering is %d characters, over the %d a CEL expression may have; list fewer namespaces or break-glass identities "+
				"(docs/install.md, Limits)", n, MaxExpressionSize)}
	}
	return c
}

// NamespaceHosts maps each namespace of a host to the hosts that list it,
// in username order. A namespace belongs to one host: the
// policies refuse every host's writes in a namespace two hosts list (they
// find them in hosts; the literal holds no second copy).
func (c Config) NamespaceHosts() map[string][]string {
	out := map[string][]string{}
	for _, u := range slices.Sorted(maps.Keys(c.Hosts)) {
		for _, ns := range c.Hosts[u] {
			out[ns] = append(out[ns], u)
		}
	}
	return out
}

// Conflicts lists the namespaces that more than one host lists, sorted. A
// namespace two hosts bind through a selector is refused to both just the
// same (contract §4.7), but which namespaces those are depends on labels
// the configuration does not hold, so only the policy finds them, per
// request.
func (c Config) Conflicts() []string {
	var out []string
	for ns, hosts := range c.NamespaceHosts() {
		if len(hosts) > 1 {
			out = append(out, ns)
		}
	}
	slices.Sort(out)
	return out
}

// Expression is c as a CEL map literal, the policies' variables.config. It
// is a constant, so the API server folds it once when it compiles the
// policy. A key exists only in the states that have it (a policy reads
// hosts only once state is rendered).
func (c Config) Expression() string {
	entries := [][2]string{{"state", quote(string(c.State))}}
	if c.Name != "" {
		entries = append(entries, [2]string{"name", quote(c.Name)})
	}
	if c.State == Rendered || c.State == Invalid {
		entries = append(entries, [2]string{"generation", strconv.FormatInt(c.Generation, 10)})
	}
	if c.Reason != "" {
		entries = append(entries, [2]string{"reason", quote(c.Reason)})
	}
	if c.State == Rendered {
		entries = append(entries,
			[2]string{"labelKey", quote(c.LabelKey)},
			[2]string{"hosts", stringListMap(c.Hosts)},
			[2]string{"selectors", selectorMap(c.Selectors)},
			[2]string{"breakGlassUsers", stringList(c.BreakGlassUsers)},
			[2]string{"breakGlassGroups", stringList(c.BreakGlassGroups)},
			[2]string{"strictDelete", strconv.FormatBool(c.StrictDelete)},
		)
	}
	var b strings.Builder
	b.WriteString("{")
	for i, e := range entries {
		if i > 0 {
			b.WriteString(",\n ")
		}
		// CEL in Kubernetes wants a literal's values of one type: each
		// is dyn, so the map is map(string, dyn).
		b.WriteString(quote(e[0]) + ": dyn(" + e[1] + ")")
	}
	b.WriteString("}")
	return b.String()
}

// MatchConditionExpression routes to the webhook the bound hosts' writes in
// their own namespaces, the only ones it checks: a
// rendered configuration's hosts, nobody otherwise (RoutesNobody). So a webhook outage
// can refuse a bound host's write in its own namespaces, where the fence
// must not admit it unchecked, and nothing else.
func (c Config) MatchConditionExpression() string {
	if c.State != Rendered || len(c.Hosts) == 0 {
		return RoutesNobody
	}
	hosts := stringListMap(c.Hosts)
	own := "request.namespace in " + hosts + "[request.userInfo.username]"
	if len(c.Selectors) > 0 {
		// A webhook's match conditions cannot read the namespace's labels,
		// so a host bound by selector is routed in every namespace, and
		// the webhook tells its own (fencev1alpha1.Host.Binds).
		own = "(" + own + " || request.userInfo.username in " + stringList(slices.Sorted(maps.Keys(c.Selectors))) + ")"
	}
	return "request.userInfo.username in " + hosts + " && " + own
}

// quote writes s as a CEL string literal. Go's quoting escapes exactly with
// sequences CEL reads the same way (\a \b \f \n \r \t \v \\ \" \uXXXX
// \UXXXXXXXX; a FenceConfig holds valid UTF-8 only, so no \x); TestQuote
// parses the result with CEL.
func quote(s string) string { return strconv.Quote(s) }

func stringList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func stringListMap(m map[string][]string) string {
	var entries []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		entries = append(entries, quote(k)+": "+stringList(m[k]))
	}
	return "{" + strings.Join(entries, ", ") + "}"
}

// selectorMap writes each selector as a CEL map with both keys always
// present, so the policy reads them without optional access.
func selectorMap(m map[string]*fencev1alpha1.NamespaceSelector) string {
	var entries []string
	for _, u := range slices.Sorted(maps.Keys(m)) {
		sel := m[u]
		var labels []string
		for _, k := range slices.Sorted(maps.Keys(sel.MatchLabels)) {
			labels = append(labels, quote(k)+": "+quote(string(sel.MatchLabels[k])))
		}
		var exprs []string
		for _, e := range sel.MatchExpressions {
			exprs = append(exprs, "{\"key\": dyn("+quote(e.Key)+"), \"operator\": dyn("+quote(e.Operator)+
				"), \"values\": dyn("+stringList(e.Values)+")}")
		}
		entries = append(entries, quote(u)+": {\"matchLabels\": dyn({"+strings.Join(labels, ", ")+
			"}), \"matchExpressions\": dyn(["+strings.Join(exprs, ", ")+"])}")
	}
	return "{" + strings.Join(entries, ", ") + "}"
}
