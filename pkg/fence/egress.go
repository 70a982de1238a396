package fence

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Owner kinds of a per-sandbox policy, each paired with its one apiVersion
// (the fence checks the pair, not two independent lists).
const (
	OwnerKindSandboxClaim = "SandboxClaim"
	OwnerKindSandbox      = "Sandbox"
)

var ownerAPIVersions = map[string]string{
	OwnerKindSandboxClaim: SandboxClaimGVR.GroupVersion().String(),
	OwnerKindSandbox:      SandboxGVR.GroupVersion().String(),
}

var hostRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// NormalizeHost applies the host-name grammar of contract §4.2 and returns the
// entry lowercased, keeping its leading dot (".example.com" means the domain
// and the names one label below it under Cilium v1.20).
// NormalizeHost of its own result returns it unchanged.
//
// Only ASCII letters are lowercased: JavaScript's toLowerCase would also fold
// the Kelvin sign into "k", and a host name that only becomes valid through
// Unicode case folding is refused rather than guessed at.
func NormalizeHost(entry string) (string, error) {
	h := asciiLower(entry)
	if h == "" || h == "." {
		return "", errors.New("must name a host, e.g. api.example.com or .example.com")
	}
	bare, wildcard := strings.CutPrefix(h, ".")
	switch {
	case strings.Contains(h, "*"):
		return "", errors.New("must not contain '*'; write .example.com for example.com and the names one label below it (contract §4.6)")
	case len(bare) > 253:
		return "", fmt.Errorf("must be at most 253 characters without the leading dot, is %d", len(bare))
	case !hostRE.MatchString(bare):
		return "", errors.New("must be a DNS name of lowercase letters, digits, '-' and '.' (no scheme, port, path or trailing dot)")
	}
	labels := strings.Split(bare, ".")
	for _, l := range labels {
		// DNS carries at most 63 octets a label; the fence refuses longer
		// ones, so a host must never send one.
		if len(l) > 63 {
			return "", fmt.Errorf("label %q is %d characters; DNS allows at most 63", l[:8]+"...", len(l))
		}
	}
	if wildcard && len(labels) < 2 {
		return "", errors.New("a leading-dot entry needs at least two labels; .com would open a whole top-level domain")
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return "", errors.New("must not be an IP address: the last label is all digits")
	}
	return h, nil
}

func asciiLower(s string) string {
	return strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r + ('a' - 'A')
		}
		return r
	}, s)
}

// PolicyOwner is the object a per-sandbox policy belongs to: the SandboxClaim
// the acquire created (pooled path) or the Sandbox (pool-less path).
type PolicyOwner struct {
	Kind string
	Name string
	UID  string
}

// PolicyInput describes one per-sandbox CiliumNetworkPolicy.
type PolicyInput struct {
	Owner     PolicyOwner
	Namespace string
	// LabelKey is the endpointSelector key; "" means DefaultPerSandboxLabelKey.
	LabelKey string
	// Hosts are entries in NormalizeHost's grammar, emitted in input order.
	Hosts []string
}

// PolicyName is the name of the per-sandbox policy of an owner uid.
func PolicyName(ownerUID string) string { return PolicyNamePrefix + ownerUID }

// BuildPerSandboxPolicy builds the exact body of contract §4.1: one DNS-visibility
// rule, then one toFQDNs rule with every host in input order.
//
// Duplicates: an entry whose selectors were all emitted already (the same
// host twice, in any case, or example.com next to .example.com) adds nothing,
// and its repeated selectors are dropped rather than refused; the first
// occurrence keeps its place. The body is then a function of the hosts
// allowed, and no two entries of the list are equal.
func BuildPerSandboxPolicy(in PolicyInput) (*unstructured.Unstructured, error) {
	return aggregate(buildPerSandboxPolicy(in))
}

func buildPerSandboxPolicy(in PolicyInput) (*unstructured.Unstructured, field.ErrorList) {
	var errs field.ErrorList
	apiVersion, ok := ownerAPIVersions[in.Owner.Kind]
	if !ok {
		errs = append(errs, field.NotSupported(field.NewPath("owner", "kind"), in.Owner.Kind, []string{OwnerKindSandboxClaim, OwnerKindSandbox}))
	}
	// The owner name is the selector's label value: the fence refuses one
	// that is not a valid label value, so refuse it here.
	if in.Owner.Name == "" {
		errs = append(errs, field.Required(field.NewPath("owner", "name"), "the name of the SandboxClaim or Sandbox"))
	} else {
		for _, msg := range validation.IsValidLabelValue(in.Owner.Name) {
			errs = append(errs, field.Invalid(field.NewPath("owner", "name"), in.Owner.Name, msg))
		}
	}
	if in.Owner.UID == "" {
		errs = append(errs, field.Required(field.NewPath("owner", "uid"), "the owner's metadata.uid, read from the API server"))
	} else if msgs := validation.IsDNS1123Subdomain(PolicyName(in.Owner.UID)); len(msgs) > 0 {
		errs = append(errs, field.Invalid(field.NewPath("owner", "uid"), in.Owner.UID, strings.Join(msgs, "; ")))
	}
	if in.Namespace == "" {
		errs = append(errs, field.Required(field.NewPath("namespace"), "the owner's namespace"))
	}
	labelKey := in.LabelKey
	if labelKey == "" {
		labelKey = DefaultPerSandboxLabelKey
	}
	for _, msg := range validation.IsQualifiedName(labelKey) {
		errs = append(errs, field.Invalid(field.NewPath("labelKey"), labelKey, msg))
	}
	fqdns, hostErrs := fqdnSelectors(field.NewPath("hosts"), in.Hosts)
	errs = append(errs, hostErrs...)
	if len(errs) > 0 {
		return nil, errs
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": CiliumNetworkPolicyGVR.GroupVersion().String(),
		"kind":       "CiliumNetworkPolicy",
		"metadata": map[string]any{
			"name":      PolicyName(in.Owner.UID),
			"namespace": in.Namespace,
			"ownerReferences": []any{map[string]any{
				"apiVersion": apiVersion,
				"kind":       in.Owner.Kind,
				"name":       in.Owner.Name,
				"uid":        in.Owner.UID,
			}},
		},
		"spec": map[string]any{
			"endpointSelector": map[string]any{"matchLabels": map[string]any{labelKey: in.Owner.Name}},
			"egress":           []any{dnsVisibilityRule(), map[string]any{"toFQDNs": fqdns}},
		},
	}}, nil
}

// dnsVisibilityRule lets the pod ask kube-dns and makes Cilium's DNS proxy see
// every answer, which toFQDNs needs to learn the addresses it allows.
func dnsVisibilityRule() map[string]any {
	return map[string]any{
		"toEndpoints": []any{map[string]any{"matchLabels": map[string]any{
			"k8s:io.kubernetes.pod.namespace": "kube-system",
			"k8s:k8s-app":                     "kube-dns",
		}}},
		"toPorts": []any{map[string]any{
			"ports": []any{map[string]any{"port": "53", "protocol": "ANY"}},
			"rules": map[string]any{"dns": []any{map[string]any{"matchPattern": "*"}}},
		}},
	}
}

func fqdnSelectors(path *field.Path, hosts []string) ([]any, field.ErrorList) {
	var errs field.ErrorList
	if len(hosts) == 0 {
		errs = append(errs, field.Required(path, "at least one host; to remove all egress, delete the policy (Client.RemoveEgress)"))
	}
	var out []any
	seen := map[[2]string]bool{}
	emit := func(kind, value string) {
		if !seen[[2]string{kind, value}] {
			seen[[2]string{kind, value}] = true
			out = append(out, map[string]any{kind: value})
		}
	}
	for i, entry := range hosts {
		h, err := NormalizeHost(entry)
		if err != nil {
			errs = append(errs, field.Invalid(path.Index(i), entry, err.Error()))
			continue
		}
		if domain, ok := strings.CutPrefix(h, "."); ok {
			emit("matchName", domain)
			emit("matchPattern", "*."+domain)
		} else {
			emit("matchName", h)
		}
	}
	return out, errs
}
