package ciliumproof

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fencev1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/internal/policyconfig"
	"github.com/sandbox-fence/sandbox-fence/internal/vapeval"
)

// HostUser is the bound host identity every body is written as.
const HostUser = "system:serviceaccount:sbx:sandbox-host"

// Fence is the shipped bundle, every policies/*/policy.yaml with its
// binding as the repository has them at test time (never a copy), loaded
// into the API server's own validating admission policy plugin, one
// instance per label key: a FenceConfig binding HostUser to Namespace
// (opted in) with that perSandboxLabelKey.
//
// The webhook's checks (the owner exists with that uid and kind, is not
// being deleted, carries the label) are not run: every owner is taken to be
// valid, so a verdict here is the VAP's alone.
type Fence struct {
	harnesses map[string]*vapeval.Harness
	// Policies are the policy names loaded.
	Policies []string
}

// LoadBundle reads policiesDir/*/{policy,binding}.yaml.
func LoadBundle(policiesDir string) ([]*vapeval.PolicyDir, error) {
	matches, err := filepath.Glob(filepath.Join(policiesDir, "*", "policy.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(matches)
	var bundle []*vapeval.PolicyDir
	for _, m := range matches {
		p, err := vapeval.LoadPolicyDir(filepath.Dir(m))
		if err != nil {
			return nil, err
		}
		bundle = append(bundle, p)
	}
	if len(bundle) == 0 {
		return nil, fmt.Errorf("no %s/*/policy.yaml", policiesDir)
	}
	return bundle, nil
}

// StartFence starts the bundle: one plugin per label key, each under a
// FenceConfig binding HostUser to namespace with that label key.
func StartFence(ctx context.Context, bundle []*vapeval.PolicyDir, namespace string, labelKeys ...string) (*Fence, error) {
	f := &Fence{harnesses: map[string]*vapeval.Harness{}}
	for _, p := range bundle {
		f.Policies = append(f.Policies, p.Policy.Name)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace, Labels: map[string]string{fencev1.FencedNamespaceLabel: fencev1.FencedNamespaceValue}}}
	for _, key := range labelKeys {
		// The key is always set, as the API server serves it: the CRD
		// defaults it to fence.DefaultPerSandboxLabelKey.
		cfg := &fencev1.FenceConfig{ObjectMeta: metav1.ObjectMeta{Name: fencev1.DefaultConfigName}, Spec: fencev1.FenceConfigSpec{
			Hosts: []fencev1.Host{{Username: HostUser, Namespaces: []string{namespace}}}, PerSandboxLabelKey: key}}
		h, err := vapeval.Start(ctx, vapeval.Env{Policies: vapeval.Rendered(bundle, policyconfig.FromFenceConfig(cfg.Name, cfg)),
			Namespaces: []*corev1.Namespace{ns}, Resources: vapeval.Resources})
		if err != nil {
			f.Stop()
			return nil, err
		}
		f.harnesses[key] = h
	}
	return f, nil
}

// Stop ends every plugin.
func (f *Fence) Stop() {
	for _, h := range f.harnesses {
		h.Stop()
	}
}

// Verdict is the bundle's answer to one body: the API server's (allowed, or
// code, reason and message), and Rule.
type Verdict struct {
	vapeval.Verdict
	// Rule names what denied: the field path of a cilium-fence: message with
	// its indexes dropped (spec.egress[].toFQDNs[]), or the message itself
	// when it is not the fence's.
	Rule string
}

var indexRE = regexp.MustCompile(`\[\d+\]`)

// Evaluate runs the body's request (a CREATE, or an UPDATE of the unmutated
// body, at the unmutated body's name) through the bundle. An error is a
// plugin failure, not a denial.
func (f *Fence) Evaluate(ctx context.Context, b Body) (Verdict, error) {
	h := f.harnesses[b.Subject.LabelKey]
	if h == nil {
		return Verdict{}, fmt.Errorf("no FenceConfig for label key %q", b.Subject.LabelKey)
	}
	in := vapeval.CaseInput{Operation: "CREATE", User: HostUser, Namespace: b.Subject.Namespace, Object: b.Object}
	if b.Update {
		in.Operation, in.OldObject = "UPDATE", b.Base
		in.Name = (&unstructured.Unstructured{Object: b.Base}).GetName()
	}
	v, err := h.Run(ctx, in)
	if err != nil {
		return Verdict{}, err
	}
	if v.Allowed {
		return Verdict{Verdict: v}, nil
	}
	return Verdict{Verdict: v, Rule: denyingRule(v.Message)}, nil
}

func denyingRule(msg string) string {
	const marker = " denied request: cilium-fence: "
	i := strings.Index(msg, marker)
	if i < 0 {
		if j := strings.Index(msg, " denied request: "); j >= 0 {
			msg = msg[j+len(" denied request: "):]
		}
		if len(msg) > 80 {
			msg = msg[:80]
		}
		return "not the fence's: " + msg
	}
	rest := msg[i+len(marker):]
	if j := strings.Index(rest, ": "); j >= 0 {
		rest = rest[:j]
	}
	return indexRE.ReplaceAllString(rest, "[]")
}
