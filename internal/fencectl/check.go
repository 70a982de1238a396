package fencectl

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/version"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/internal/enforcement"
	"github.com/sandbox-fence/sandbox-fence/internal/kubeversion"
	"github.com/sandbox-fence/sandbox-fence/internal/policyconfig"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// Default names of the webhook's objects (config/webhook).
const (
	DefaultWebhookConfig    = "sandbox-fence-webhook"
	DefaultWebhookNamespace = fencev1alpha1.DefaultNamespace
)

// CRDs are the custom resources the fence reads or guards.
var CRDs = []string{
	fencev1alpha1.GroupVersionResource.GroupResource().String(),
	fence.SandboxGVR.GroupResource().String(),
	fence.SandboxClaimGVR.GroupResource().String(),
	fence.CiliumNetworkPolicyGVR.GroupResource().String(),
}

// CheckResult is one piece of the installation.
type CheckResult struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// CheckReport is the output of `kubectl fence check`.
type CheckReport struct {
	APIVersion string        `json:"apiVersion"`
	Kind       string        `json:"kind"`
	Checks     []CheckResult `json:"checks"`
}

// Failed counts the checks that did not pass.
func (r *CheckReport) Failed() int {
	n := 0
	for _, c := range r.Checks {
		if !c.OK {
			n++
		}
	}
	return n
}

// CheckOptions add the webhook's names to Options.
type CheckOptions struct {
	Options
	WebhookConfig    string
	WebhookNamespace string
	// DialTimeout bounds the TLS handshake with a URL webhook.
	DialTimeout time.Duration
}

var crdGVR = apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions")

// Check verifies an installation piece by piece and names what is missing
// or inconsistent.
func Check(ctx context.Context, c Clients, o CheckOptions) (*CheckReport, error) {
	r := &CheckReport{APIVersion: fencev1alpha1.GroupVersion.String(), Kind: "CheckReport"}
	add := func(name string, ok bool, format string, args ...any) {
		r.Checks = append(r.Checks, CheckResult{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
	}

	// Kubernetes version.
	if v, err := c.Kube.Discovery().ServerVersion(); err != nil {
		add("Kubernetes version", false, "cannot read the server version: %v", err)
	} else if sv, err := version.ParseGeneric(v.GitVersion); err != nil {
		add("Kubernetes version", false, "cannot parse %q: %v", v.GitVersion, err)
	} else {
		// A supported API server with the CEL race runs the policies, so the
		// check passes, but says what the admin risks.
		ok := kubeversion.Check(v.GitVersion) == nil
		detail := fmt.Sprintf("%s (the policies need %s or later)", v.GitVersion, strings.TrimPrefix(kubeversion.Minimum, "v"))
		if ok && kubeversion.HasCELRace(sv) {
			detail += fmt.Sprintf("; before %s kube-apiserver can exit when an admission policy changes, as the bundle's do on every FenceConfig change (kubernetes/kubernetes#135757): upgrade", strings.TrimPrefix(kubeversion.FirstWithoutCELRace, "v"))
		}
		add("Kubernetes version", ok, "%s", detail)
	}

	// CRDs.
	for _, name := range CRDs {
		crd, err := c.Dynamic.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			add("CRD "+name, false, "not installed")
		case err != nil:
			add("CRD "+name, false, "cannot read: %v", err)
		case !established(crd):
			add("CRD "+name, false, "installed but not Established")
		default:
			add("CRD "+name, true, "Established")
		}
	}

	// Policies and bindings.
	in, err := readInstalled(ctx, c, o.Options)
	if err != nil {
		return nil, err
	}
	pols := map[string]*admissionregistrationv1.ValidatingAdmissionPolicy{}
	for i := range in.policies {
		pols[in.policies[i].Name] = &in.policies[i]
	}
	bindings := map[string]*admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	for i := range in.allBindings {
		bindings[in.allBindings[i].Name] = &in.allBindings[i]
	}
	// What every policy that reads configuration must carry: the
	// FenceConfig as the controller renders it (internal/policyconfig).
	want := policyconfig.FromFenceConfig(o.ConfigName, in.config)
	checkPolicy := func(name string, p *admissionregistrationv1.ValidatingAdmissionPolicy, unboundNote string) {
		var got string
		var reads bool
		if p != nil {
			got, reads = policyconfig.PolicyExpression(p)
		}
		switch {
		case p == nil:
			add("ValidatingAdmissionPolicy "+name, false, "not installed (or not labelled %s)%s", BundleLabel, unboundNote)
		case typeWarnings(p) != "":
			add("ValidatingAdmissionPolicy "+name, false, "type-checking warnings: %s", typeWarnings(p))
		case reads && got != want.Expression():
			add("ValidatingAdmissionPolicy "+name, false, "does not carry FenceConfig %q as it is now (%s there, %s in the policy): "+
				"the controller in the webhook Deployment renders it; check its pods and kubectl get fenceconfig", o.ConfigName,
				describe(want), describeExpression(got))
		case reads:
			add("ValidatingAdmissionPolicy "+name, true, "installed, type-checks, carries FenceConfig %q (%s)", o.ConfigName, describe(want))
		default:
			add("ValidatingAdmissionPolicy "+name, true, "installed, type-checks")
		}
	}
	for _, shipped := range ShippedPolicies {
		name := o.PolicyPrefix + shipped
		p := pols[name]
		checkPolicy(name, p, "")
		bname := name + "-binding"
		b := bindings[bname]
		switch {
		case b == nil:
			add("ValidatingAdmissionPolicyBinding "+bname, false, "not installed: hosts look it up by this name before writing (contract §4.1)")
		case b.Spec.PolicyName != name:
			add("ValidatingAdmissionPolicyBinding "+bname, false, "binds %q instead of %s", b.Spec.PolicyName, name)
		default:
			add("ValidatingAdmissionPolicyBinding "+bname, true, "binds %s, validationActions %v", b.Spec.PolicyName, b.Spec.ValidationActions)
		}
	}

	// Strict delete: installed unbound; its binding is opt-in.
	sdName := o.PolicyPrefix + PolicyStrictDelete
	checkPolicy(sdName, pols[sdName], ": config/vap installs it unbound")
	sdBinding := sdName + "-binding"
	switch b := bindings[sdBinding]; {
	case b == nil:
		add("ValidatingAdmissionPolicyBinding "+sdBinding, true, "not installed: strict delete is off (opt-in, docs/install.md)")
	case b.Spec.PolicyName != sdName:
		add("ValidatingAdmissionPolicyBinding "+sdBinding, false, "binds %q instead of %s", b.Spec.PolicyName, sdName)
	default:
		add("ValidatingAdmissionPolicyBinding "+sdBinding, true, "binds %s, validationActions %v; strict delete is on where the FenceConfig sets spec.strictDelete", b.Spec.PolicyName, b.Spec.ValidationActions)
	}

	// Enforcement mode: one for every binding, and the webhook's the same.
	mode, why := in.mode()
	if mode == "" {
		add("Enforcement mode", false, "the bindings disagree: %s (apply one component of config/components/enforcement)", why)
	} else if flag, err := webhookEnforcement(ctx, c, o); err != nil {
		add("Enforcement mode", true, "%s (bindings); the webhook's flag was not read: %v", mode, err)
	} else if flag != mode {
		add("Enforcement mode", false, "bindings are %s but the webhook runs --enforcement=%s", mode, flag)
	} else {
		add("Enforcement mode", true, "%s (bindings and webhook)", mode)
	}

	// FenceConfig.
	switch {
	case in.config == nil:
		add("FenceConfig "+o.ConfigName, false, "not found: the egress policy refuses CiliumNetworkPolicy writes and deletes in opted-in namespaces by every ServiceAccount outside kube-system (contract §8.3, docs/install.md)")
	case want.State == policyconfig.Invalid:
		add("FenceConfig "+o.ConfigName, false, "not in force: %s", want.Reason)
	case len(in.config.Spec.Hosts) == 0:
		add("FenceConfig "+o.ConfigName, true, "present; spec.hosts is empty, so no host is fenced yet")
	default:
		var hs []string
		for _, h := range in.config.Spec.Hosts {
			hs = append(hs, h.Username)
		}
		add("FenceConfig "+o.ConfigName, true, "present; hosts: %s", strings.Join(hs, ", "))
	}

	// Opted-in namespaces.
	var opted []string
	byName := map[string]bool{}
	for i := range in.namespaces {
		byName[in.namespaces[i].Name] = true
		if optedIn(&in.namespaces[i]) {
			opted = append(opted, in.namespaces[i].Name)
		}
	}
	var notOpted []string
	if in.config != nil {
		for _, h := range in.config.Spec.Hosts {
			for _, n := range h.Namespaces {
				if !slices.Contains(opted, n) {
					what := n
					if !byName[n] {
						what += " (does not exist)"
					}
					notOpted = append(notOpted, what)
				}
			}
			var nss []*corev1.Namespace
			for i := range in.namespaces {
				nss = append(nss, &in.namespaces[i])
			}
			for _, ns := range selectedNamespaces(&h, nss) {
				if !optedIn(ns) {
					notOpted = append(notOpted, ns.Name+" (selected)")
				}
			}
		}
	}
	sort.Strings(notOpted)
	switch {
	case len(notOpted) > 0:
		add("Opted-in namespaces", false, "host namespaces without %s=%s: %s", fencev1alpha1.FencedNamespaceLabel, fencev1alpha1.FencedNamespaceValue, strings.Join(notOpted, ", "))
	case len(opted) == 0:
		add("Opted-in namespaces", false, "no namespace carries %s=%s: the CiliumNetworkPolicy fence applies nowhere", fencev1alpha1.FencedNamespaceLabel, fencev1alpha1.FencedNamespaceValue)
	default:
		add("Opted-in namespaces", true, "%s", strings.Join(opted, ", "))
	}

	// What keeps a sandbox pod confined even without its own policy: Pod
	// Security keeps it off the host's network, the baseline policy selects it.
	checkPodSecurity(in, opted, add)
	checkBaseline(ctx, c, o, add)

	// Webhook: configuration, CA, endpoints.
	checkWebhook(ctx, c, o, add)
	return r, nil
}

// PodSecurityLevels are the Pod Security Standards that keep a pod off the
// host's network, PID and IPC namespaces: a pod with hostNetwork is no Cilium
// endpoint, so no policy would confine it.
var PodSecurityLevels = []string{"baseline", "restricted"}

// podSecurityEnforce is the label that sets a namespace's enforced level.
const podSecurityEnforce = "pod-security.kubernetes.io/enforce"

// checkPodSecurity fails on an opted-in namespace that does not enforce
// Pod Security baseline or restricted: a sandbox pod with hostNetwork is no
// Cilium endpoint, so no policy confines it.
func checkPodSecurity(in *installed, opted []string, add func(string, bool, string, ...any)) {
	var lax []string
	for i := range in.namespaces {
		ns := &in.namespaces[i]
		if slices.Contains(opted, ns.Name) && !slices.Contains(PodSecurityLevels, ns.Labels[podSecurityEnforce]) {
			level := ns.Labels[podSecurityEnforce]
			if level == "" {
				level = "none"
			}
			lax = append(lax, ns.Name+" ("+level+")")
		}
	}
	sort.Strings(lax)
	if len(lax) > 0 {
		add("Pod Security", false, "opted-in namespaces without %s=baseline or restricted, where a sandbox pod may use the host's network and escape every policy: %s",
			podSecurityEnforce, strings.Join(lax, ", "))
		return
	}
	add("Pod Security", true, "every opted-in namespace enforces baseline or restricted")
}

// BaselineName is the baseline policy config/components/cilium-baseline
// installs: it selects every pod of the opted-in namespaces and allows DNS
// only, so a pod no per-sandbox policy selects reaches nothing else.
const BaselineName = "sandbox-fence-baseline"

var ccnpGVR = schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumclusterwidenetworkpolicies"}

// checkBaseline fails when the baseline policy is missing, or does not
// select the opted-in namespaces: then a pod no per-sandbox policy selects
// (its policy deleted, its label missing or wrong) reaches everything.
func checkBaseline(ctx context.Context, c Clients, o CheckOptions, add func(string, bool, string, ...any)) {
	name := o.PolicyPrefix + BaselineName
	what := "CiliumClusterwideNetworkPolicy " + name
	u, err := c.Dynamic.Resource(ccnpGVR).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		add(what, false, "not installed: a sandbox pod no per-sandbox policy selects reaches everything; apply config/components/cilium-baseline (docs/install.md, The baseline)")
		return
	case err != nil:
		add(what, false, "cannot read: %v", err)
		return
	}
	selector, _, _ := unstructured.NestedStringMap(u.Object, "spec", "endpointSelector", "matchLabels")
	key := "k8s:io.cilium.k8s.namespace.labels." + fencev1alpha1.FencedNamespaceLabel
	if selector[key] != fencev1alpha1.FencedNamespaceValue {
		add(what, false, "does not select the opted-in namespaces (endpointSelector.matchLabels %s: %q)", key, fencev1alpha1.FencedNamespaceValue)
		return
	}
	add(what, true, "selects every pod of the opted-in namespaces")
}

func established(u *unstructured.Unstructured) bool {
	var crd apiextensionsv1.CustomResourceDefinition
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &crd) == nil &&
		apihelpers.IsCRDConditionTrue(&crd, apiextensionsv1.Established)
}

func typeWarnings(p *admissionregistrationv1.ValidatingAdmissionPolicy) string {
	if p.Status.TypeChecking == nil {
		return ""
	}
	var ws []string
	for _, w := range p.Status.TypeChecking.ExpressionWarnings {
		ws = append(ws, w.FieldRef+": "+w.Warning)
	}
	return strings.Join(ws, "; ")
}

// webhookEnforcement reads --enforcement from the webhook Deployment's
// args (the last occurrence wins, as for the binary's flags).
func webhookEnforcement(ctx context.Context, c Clients, o CheckOptions) (enforcement.Mode, error) {
	d, err := c.Kube.AppsV1().Deployments(o.WebhookNamespace).Get(ctx, o.WebhookConfig, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	mode := enforcement.Deny
	for _, ctr := range d.Spec.Template.Spec.Containers {
		for _, a := range append(slices.Clone(ctr.Command), ctr.Args...) {
			if v, ok := strings.CutPrefix(a, "--enforcement="); ok {
				m, err := enforcement.Parse(v)
				if err != nil {
					return "", err
				}
				mode = m
			}
		}
	}
	return mode, nil
}

func checkWebhook(ctx context.Context, c Clients, o CheckOptions, add func(string, bool, string, ...any)) {
	name := "ValidatingWebhookConfiguration " + o.WebhookConfig
	vwc, err := c.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, o.WebhookConfig, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		add(name, false, "not installed: the owner checks of contract §4.4 are not enforced")
		return
	}
	if err != nil {
		add(name, false, "cannot read: %v", err)
		return
	}
	if len(vwc.Webhooks) == 0 {
		add(name, false, "has no webhooks")
		return
	}
	add(name, true, "%d webhook(s)", len(vwc.Webhooks))
	for _, h := range vwc.Webhooks {
		pool, detail := caPool(h.ClientConfig.CABundle)
		if pool == nil {
			add("Webhook "+h.Name+" CA bundle", false, "%s", detail)
		} else {
			add("Webhook "+h.Name+" CA bundle", true, "%s", detail)
		}
		switch {
		case h.ClientConfig.Service != nil:
			ok, detail := serviceEndpoints(ctx, c, h.ClientConfig.Service)
			add("Webhook "+h.Name+" endpoints", ok, "%s", detail)
		case h.ClientConfig.URL != nil:
			ok, detail := dialURL(ctx, *h.ClientConfig.URL, pool, o.DialTimeout)
			add("Webhook "+h.Name+" endpoints", ok, "%s", detail)
		default:
			add("Webhook "+h.Name+" endpoints", false, "clientConfig names neither a service nor a URL")
		}
	}
}

// caPool parses a caBundle; nil with the reason when it is empty, not PEM,
// or holds only expired certificates.
func caPool(bundle []byte) (*x509.CertPool, string) {
	if len(bundle) == 0 {
		return nil, "empty: the API server cannot verify the webhook (is the certificate rotation or cert-manager's cainjector running?)"
	}
	pool := x509.NewCertPool()
	rest := bundle
	var valid, expired int
	var notAfter time.Time
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		cert, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			continue
		}
		if time.Now().After(cert.NotAfter) {
			expired++
			continue
		}
		valid++
		pool.AddCert(cert)
		if notAfter.IsZero() || cert.NotAfter.Before(notAfter) {
			notAfter = cert.NotAfter
		}
	}
	switch {
	case valid == 0 && expired > 0:
		return nil, fmt.Sprintf("every certificate in it has expired (%d)", expired)
	case valid == 0:
		return nil, "holds no PEM certificate"
	}
	return pool, fmt.Sprintf("%d certificate(s), valid until %s", valid, notAfter.UTC().Format(time.RFC3339))
}

func serviceEndpoints(ctx context.Context, c Clients, ref *admissionregistrationv1.ServiceReference) (bool, string) {
	svc := ref.Namespace + "/" + ref.Name
	if _, err := c.Kube.CoreV1().Services(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return false, "Service " + svc + " not found"
		}
		return false, fmt.Sprintf("Service %s cannot be read: %v", svc, err)
	}
	eps, err := c.Kube.DiscoveryV1().EndpointSlices(ref.Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + ref.Name})
	if err != nil {
		return false, fmt.Sprintf("EndpointSlices of %s cannot be read: %v", svc, err)
	}
	ready := 0
	for _, s := range eps.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				ready += len(e.Addresses)
			}
		}
	}
	if ready == 0 {
		return false, "Service " + svc + " has no ready endpoint: with failurePolicy Fail its writes are refused"
	}
	return true, fmt.Sprintf("Service %s: %d ready endpoint(s)", svc, ready)
}

// dialURL completes a TLS handshake with a URL webhook, verifying its
// certificate against the caBundle, as the API server would.
func dialURL(ctx context.Context, raw string, pool *x509.CertPool, timeout time.Duration) (bool, string) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" {
		return false, fmt.Sprintf("URL %q is not https", raw)
	}
	if pool == nil {
		return false, "URL " + raw + ": no CA to verify it with"
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "443")
	}
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: &tls.Config{RootCAs: pool, ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := d.DialContext(dctx, "tcp", host)
	if err != nil {
		return false, fmt.Sprintf("URL %s: %v", raw, err)
	}
	_ = conn.Close()
	return true, "URL " + raw + ": TLS handshake verified against the caBundle"
}

// String renders the report for a person.
func (r *CheckReport) String() string {
	var b strings.Builder
	for _, c := range r.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(&b, "%s  %s: %s\n", mark, c.Name, c.Detail)
	}
	if n := r.Failed(); n > 0 {
		fmt.Fprintf(&b, "\n%d of %d checks failed\n", n, len(r.Checks))
	} else {
		fmt.Fprintf(&b, "\nall %d checks passed\n", len(r.Checks))
	}
	return b.String()
}

// describe names what a rendered configuration says, for a finding.
func describe(c policyconfig.Config) string {
	switch c.State {
	case policyconfig.Rendered, policyconfig.Invalid:
		return fmt.Sprintf("%s, generation %d", c.State, c.Generation)
	}
	return string(c.State)
}

// describeExpression is describe for a policy's rendered expression: its
// state and generation, read from the literal without evaluating it.
func describeExpression(expr string) string {
	state, generation := "unknown", ""
	if m := renderedState.FindStringSubmatch(expr); m != nil {
		state = m[1]
	}
	if m := renderedGeneration.FindStringSubmatch(expr); m != nil {
		generation = ", generation " + m[1]
	}
	return state + generation
}

var (
	renderedState      = regexp.MustCompile(`"state": dyn\("([a-z]+)"\)`)
	renderedGeneration = regexp.MustCompile(`"generation": dyn\(([0-9]+)\)`)
)
