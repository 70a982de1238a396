package fencectl

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/internal/admit"
	"github.com/sandbox-fence/sandbox-fence/internal/vapeval"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// What an audit finding is about (docs/kubectl-fence.md lists them).
const (
	// CheckMalformedAnnotation: a Sandbox carries a backend annotation the
	// holder-epoch policy would refuse to store today: such a value can only
	// predate the fence, which admits it while a write carries it along
	// unchanged.
	CheckMalformedAnnotation = "malformed-annotation"
	// CheckOversizedAnnotation: a backend annotation over 16384 characters,
	// refused on create and whenever a write changes its length (a write
	// that carries it along unchanged is still admitted, so it can only
	// predate the fence).
	CheckOversizedAnnotation = "oversized-annotation"
	// CheckOrphanFinalizer: a Sandbox in an opted-in namespace carries the
	// orphan finalizer, so deleting it would leave its per-sandbox policy
	// behind, an allowance for whichever sandbox next takes the name; the
	// cilium-owner policy refuses it.
	CheckOrphanFinalizer = "orphan-finalizer"
	// CheckPolicyNotAdmitted: a per-sandbox CiliumNetworkPolicy the egress
	// policy would refuse from the host bound to its namespace.
	CheckPolicyNotAdmitted = "policy-not-admitted"
	// CheckOrphanedPolicy: a per-sandbox policy without a live owner: no
	// ownerReference, an owner that does not exist, has another uid, or is
	// being deleted: an invented uid would live until garbage collection
	// noticed.
	CheckOrphanedPolicy = "orphaned-policy"
	// CheckOwnerLabel: the owner exists but does not label its pods as the
	// selector expects, or its name is no label value, so the policy's
	// selector does not pick out the owner's own pods.
	CheckOwnerLabel = "owner-label"
	// CheckNamespaceNotOptedIn: a host's namespace, or one holding
	// per-sandbox policies, lacks the opt-in label, so the fence does not
	// see policy writes there.
	CheckNamespaceNotOptedIn = "namespace-not-opted-in"
	// CheckNamespaceMissing: a Sandbox or per-sandbox policy whose namespace
	// no longer exists: a namespace deletion finished without removing it.
	// No policy can be evaluated for it: the API server's evaluator answers
	// that the namespace is not found, until the namespace is there again.
	CheckNamespaceMissing = "namespace-missing"
)

// Finding is one thing the fence would refuse today, or cannot see.
type Finding struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Check     string `json:"check"`
	// By is the policy or rule that found it: a ValidatingAdmissionPolicy's
	// name, "webhook" (the owner checks of internal/admit) or "FenceConfig".
	By      string `json:"by"`
	Message string `json:"message"`
}

// AuditReport is the output of `kubectl fence audit`.
type AuditReport struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Enforcement is the mode of the installed bindings (or what is
	// inconsistent about them).
	Enforcement string `json:"enforcement"`
	// Policies are the installed policies the objects were evaluated with.
	Policies []string `json:"policies"`
	// Sandboxes and PerSandboxPolicies count what was checked.
	Sandboxes          int       `json:"sandboxes"`
	PerSandboxPolicies int       `json:"perSandboxPolicies"`
	Findings           []Finding `json:"findings"`

	// audited counts the objects evaluated in each namespace, the passes
	// of its policy report.
	audited map[string]int
}

// auditUser sends the evaluated Sandbox CREATEs: the holder-epoch policy
// does not depend on who writes.
const auditUser = "system:serviceaccount:sandbox-fence-system:kubectl-fence-audit"

// AuditOptions scope an audit.
type AuditOptions struct {
	Options
	// Namespace limits the audit to one namespace; empty audits all.
	Namespace string
	// Selector limits the Sandboxes and per-sandbox policies audited to
	// those whose labels match (kubectl's -l syntax). Owners are read
	// whatever their labels: a policy's owner need not match its selector.
	Selector string
}

// Audit evaluates every Sandbox and every per-sandbox CiliumNetworkPolicy
// in scope against the installed policies, with the API server's own validating
// admission policy plugin (internal/vapeval) as if each were created today
// with the bindings in Deny mode, and runs the webhook's owner checks
// (internal/admit) on every per-sandbox policy. Nothing is written.
func Audit(ctx context.Context, c Clients, o AuditOptions) (*AuditReport, error) {
	if _, err := labels.Parse(o.Selector); err != nil {
		return nil, fmt.Errorf("-l %q: %w", o.Selector, err)
	}
	in, err := readInstalled(ctx, c, o.Options)
	if err != nil {
		return nil, err
	}
	if len(in.policies) == 0 {
		return nil, fmt.Errorf("no ValidatingAdmissionPolicy labelled %s is installed: nothing to audit against (run kubectl fence check)", BundleLabel)
	}
	report := &AuditReport{APIVersion: fencev1alpha1.GroupVersion.String(), Kind: "AuditReport", Findings: []Finding{}, audited: map[string]int{}}
	if m, why := in.mode(); m != "" {
		report.Enforcement = string(m)
	} else {
		report.Enforcement = "inconsistent (" + why + ")"
	}
	// The policies evaluated are those with a binding (strict delete is
	// installed unbound unless switched on).
	bound := map[string]bool{}
	for _, b := range in.bindings {
		bound[b.Spec.PolicyName] = true
	}
	for _, p := range in.policies {
		if bound[p.Name] {
			report.Policies = append(report.Policies, p.Name)
		}
	}
	sort.Strings(report.Policies)

	h, err := startHarness(ctx, in)
	if err != nil {
		return nil, err
	}
	defer h.Stop()

	sandboxes, err := listAll(ctx, c, sandboxGVR, o.Namespace, o.Selector)
	if err != nil {
		return nil, err
	}
	owners, err := listOwners(ctx, c, o.Namespace, sandboxes, o.Selector != "")
	if err != nil {
		return nil, err
	}
	cnps, err := listAll(ctx, c, cnpGVR, o.Namespace, o.Selector)
	if err != nil {
		return nil, err
	}
	nss := map[string]*corev1.Namespace{}
	for i := range in.namespaces {
		nss[in.namespaces[i].Name] = &in.namespaces[i]
	}
	report.Sandboxes = len(sandboxes)
	for i := range sandboxes {
		if f := namespaceMissing(nss, &sandboxes[i]); f != nil {
			report.Findings = append(report.Findings, *f)
			continue
		}
		report.audited[sandboxes[i].GetNamespace()]++
		f, err := auditSandbox(ctx, h, &sandboxes[i])
		if err != nil {
			return nil, err
		}
		report.Findings = append(report.Findings, f...)
	}

	spec := fencev1alpha1.FenceConfigSpec{}
	if in.config != nil {
		spec = in.config.Spec
	}
	notOptedIn := map[string]bool{}
	for i := range cnps {
		cnp := &cnps[i]
		if !strings.HasPrefix(cnp.GetName(), fence.PolicyNamePrefix) {
			continue
		}
		report.PerSandboxPolicies++
		if f := namespaceMissing(nss, cnp); f != nil {
			report.Findings = append(report.Findings, *f)
			continue
		}
		report.audited[cnp.GetNamespace()]++
		if ns := nss[cnp.GetNamespace()]; ns != nil && !optedIn(ns) {
			notOptedIn[ns.Name] = true
		}
		f, err := auditPolicy(ctx, h, &spec, owners, cnp, nss[cnp.GetNamespace()].Labels)
		if err != nil {
			return nil, err
		}
		report.Findings = append(report.Findings, f...)
	}
	for _, f := range namespaceFindings(in, nss, notOptedIn) {
		if o.Namespace == "" || f.Name == o.Namespace {
			report.Findings = append(report.Findings, f)
		}
	}
	sort.SliceStable(report.Findings, func(i, j int) bool {
		a, b := report.Findings[i], report.Findings[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	return report, nil
}

// startHarness loads the installed policies, as the controller rendered
// them, with every binding switched to Deny, so an audit reports what the
// fence would refuse whatever mode it runs in, with the live namespaces.
func startHarness(ctx context.Context, in *installed) (*vapeval.Harness, error) {
	byName := map[string]*admissionregistrationv1.ValidatingAdmissionPolicy{}
	for i := range in.policies {
		byName[in.policies[i].Name] = &in.policies[i]
	}
	var env vapeval.Env
	for i := range in.bindings {
		b := in.bindings[i].DeepCopy()
		b.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}
		p := byName[b.Spec.PolicyName].DeepCopy()
		p.TypeMeta = metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicy"}
		b.TypeMeta = metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicyBinding"}
		// Fresh objects for the fake clients: the cluster's resourceVersions
		// and uids mean nothing there.
		p.ObjectMeta = metav1.ObjectMeta{Name: p.Name, Labels: p.Labels}
		b.ObjectMeta = metav1.ObjectMeta{Name: b.Name, Labels: b.Labels}
		env.Policies = append(env.Policies, &vapeval.PolicyDir{Policy: p, Binding: b})
	}
	for i := range in.namespaces {
		ns := in.namespaces[i].DeepCopy()
		ns.ObjectMeta = metav1.ObjectMeta{Name: ns.Name, Labels: ns.Labels}
		env.Namespaces = append(env.Namespaces, ns)
	}
	env.Resources = vapeval.Resources
	h, err := vapeval.Start(ctx, env)
	if err != nil {
		return nil, fmt.Errorf("loading the installed policies into the evaluator: %w", err)
	}
	return h, nil
}

// namespaceMissing reports obj when its namespace is not among the listed
// ones. The API server's evaluator would only say the namespace is not
// found, which is no verdict on the object; the remedy is the namespace's.
func namespaceMissing(nss map[string]*corev1.Namespace, obj *unstructured.Unstructured) *Finding {
	if nss[obj.GetNamespace()] != nil {
		return nil
	}
	return &Finding{Kind: obj.GetKind(), Namespace: obj.GetNamespace(), Name: obj.GetName(), Check: CheckNamespaceMissing, By: "Namespace",
		Message: fmt.Sprintf("namespace %q does not exist, but this %s is still stored in it: a deletion of the namespace finished without removing it (Kubernetes' namespace controller can, when it meets a starting kube-apiserver); delete it, which the fence does not refuse", obj.GetNamespace(), obj.GetKind())}
}

func auditSandbox(ctx context.Context, h *vapeval.Harness, sbx *unstructured.Unstructured) ([]Finding, error) {
	obj := sbx.DeepCopy()
	// A Sandbox listed without apiVersion would not map to its resource.
	obj.SetGroupVersionKind(fence.SandboxGVK)
	msg, denied, err := evaluate(ctx, h, obj, &user.DefaultInfo{Name: auditUser})
	if err != nil || !denied {
		return nil, err
	}
	check := CheckMalformedAnnotation
	switch {
	case strings.HasSuffix(msg.policy, PolicyCiliumOwner):
		check = CheckOrphanFinalizer
	case strings.Contains(msg.text, "character limit"):
		check = CheckOversizedAnnotation
	}
	return []Finding{{Kind: "Sandbox", Namespace: sbx.GetNamespace(), Name: sbx.GetName(), Check: check, By: msg.policy, Message: msg.text}}, nil
}

func auditPolicy(ctx context.Context, h *vapeval.Harness, spec *fencev1alpha1.FenceConfigSpec, owners admit.OwnerLookup, cnp *unstructured.Unstructured, nsLabels map[string]string) ([]Finding, error) {
	var out []Finding
	add := func(check, by, msg string) {
		out = append(out, Finding{Kind: "CiliumNetworkPolicy", Namespace: cnp.GetNamespace(), Name: cnp.GetName(), Check: check, By: by, Message: msg})
	}
	// As the host bound to this namespace would write it: the egress policy
	// fences bound hosts only, so any other identity's evaluation says nothing.
	if host := hostFor(spec, cnp.GetNamespace(), nsLabels); host != "" {
		obj := cnp.DeepCopy()
		obj.SetGroupVersionKind(fence.CiliumNetworkPolicyGVK)
		msg, denied, err := evaluate(ctx, h, obj, &user.DefaultInfo{Name: host})
		if err != nil {
			return nil, err
		}
		if denied {
			add(CheckPolicyNotAdmitted, msg.policy, msg.text)
		}
	}
	errs, _ := admit.ValidateCiliumOwner(ctx, spec, owners, nil, cnp)
	for _, e := range errs {
		check := CheckOwnerLabel
		if orphaned(e) {
			check = CheckOrphanedPolicy
		}
		add(check, "webhook", admit.CiliumFamily.Message(e.Error()))
	}
	return out, nil
}

// orphaned tells an owner that is not there (or not this one) from an
// owner that is there but labels its pods wrongly.
func orphaned(e *field.Error) bool {
	switch {
	case e.Type == field.ErrorTypeNotFound, e.Type == field.ErrorTypeForbidden,
		e.Type == field.ErrorTypeRequired && e.Field == "metadata.ownerReferences",
		e.Type == field.ErrorTypeTooMany, e.Type == field.ErrorTypeNotSupported,
		strings.HasSuffix(e.Field, ".uid"), strings.HasSuffix(e.Field, ".kind"):
		return true
	}
	return false
}

// hostFor is the first host bound in namespace ns, by list or selector.
func hostFor(spec *fencev1alpha1.FenceConfigSpec, ns string, nsLabels map[string]string) string {
	for _, h := range spec.Hosts {
		if h.Binds(ns, nsLabels) {
			return h.Username
		}
	}
	return ""
}

// selectedNamespaces are the namespaces among nss that h's selector binds
// and its list does not name, sorted.
func selectedNamespaces(h *fencev1alpha1.Host, nss []*corev1.Namespace) []*corev1.Namespace {
	var out []*corev1.Namespace
	for _, ns := range nss {
		if !slices.Contains(h.Namespaces, ns.Name) && h.NamespaceSelector.Matches(ns.Labels) {
			out = append(out, ns)
		}
	}
	slices.SortFunc(out, func(a, b *corev1.Namespace) int { return strings.Compare(a.Name, b.Name) })
	return out
}

type denial struct{ policy, text string }

// evaluate runs a CREATE of obj as u and returns the denying policy and its
// own message (after "denied request: ").
func evaluate(ctx context.Context, h *vapeval.Harness, obj *unstructured.Unstructured, u user.Info) (denial, bool, error) {
	gvk := obj.GroupVersionKind()
	var gvr schema.GroupVersionResource
	for _, r := range vapeval.Resources {
		if r.GVK == gvk {
			gvr = r.GVR()
		}
	}
	err := h.Validate(ctx, vapeval.Request{
		Operation: admission.Create, Kind: gvk, Resource: gvr, Namespace: obj.GetNamespace(), Name: obj.GetName(),
		Object: obj, Options: &metav1.CreateOptions{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "CreateOptions"}}, User: u,
	})
	if err == nil {
		return denial{}, false, nil
	}
	var status *apierrors.StatusError
	if !errors.As(err, &status) {
		return denial{}, false, fmt.Errorf("evaluating %s %s/%s: %w", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
	}
	msg := status.Status().Message
	d := denial{text: msg}
	// "<resource> "<name>" is forbidden: ValidatingAdmissionPolicy '<p>'
	// with binding '<b>' denied request: <the policy's message>"
	if _, rest, ok := strings.Cut(msg, "ValidatingAdmissionPolicy '"); ok {
		if name, after, ok := strings.Cut(rest, "'"); ok {
			d.policy = name
			if _, text, ok := strings.Cut(after, " denied request: "); ok {
				d.text = text
			}
		}
	}
	return d, true, nil
}

func namespaceFindings(in *installed, nss map[string]*corev1.Namespace, holdingPolicies map[string]bool) []Finding {
	var out []Finding
	seen := map[string]bool{}
	if in.config != nil {
		for _, h := range in.config.Spec.Hosts {
			for _, n := range h.Namespaces {
				ns := nss[n]
				switch {
				case ns == nil:
					out = append(out, Finding{Kind: "Namespace", Name: n, Check: CheckNamespaceNotOptedIn, By: "FenceConfig",
						Message: fmt.Sprintf("FenceConfig %q binds host %s to namespace %s, which does not exist; create it with the label %s=%s", in.config.Name, h.Username, n, fencev1alpha1.FencedNamespaceLabel, fencev1alpha1.FencedNamespaceValue)})
				case !optedIn(ns):
					out = append(out, Finding{Kind: "Namespace", Name: n, Check: CheckNamespaceNotOptedIn, By: "FenceConfig",
						Message: fmt.Sprintf("host %s drives sandboxes in %s, but the namespace lacks %s=%s, so the fence refuses its CiliumNetworkPolicy writes there until the namespace is labelled (contract §4.3 rule 8)", h.Username, n, fencev1alpha1.FencedNamespaceLabel, fencev1alpha1.FencedNamespaceValue)})
				}
				seen[n] = true
			}
			for _, ns := range selectedNamespaces(&h, slices.Collect(maps.Values(nss))) {
				if !optedIn(ns) {
					out = append(out, Finding{Kind: "Namespace", Name: ns.Name, Check: CheckNamespaceNotOptedIn, By: "FenceConfig",
						Message: fmt.Sprintf("the namespaceSelector of host %s selects %s, but the namespace lacks %s=%s, so the fence refuses its CiliumNetworkPolicy writes there until the namespace is labelled (contract §4.3 rule 8)", h.Username, ns.Name, fencev1alpha1.FencedNamespaceLabel, fencev1alpha1.FencedNamespaceValue)})
				}
				seen[ns.Name] = true
			}
		}
	}
	var extra []string
	for n := range holdingPolicies {
		if !seen[n] {
			extra = append(extra, n)
		}
	}
	sort.Strings(extra)
	for _, n := range extra {
		out = append(out, Finding{Kind: "Namespace", Name: n, Check: CheckNamespaceNotOptedIn, By: "FenceConfig",
			Message: fmt.Sprintf("%s holds per-sandbox policies (%s*) but lacks %s=%s: whoever writes them there is not fenced (contract §8.3)", n, fence.PolicyNamePrefix, fencev1alpha1.FencedNamespaceLabel, fencev1alpha1.FencedNamespaceValue)})
	}
	return out
}

// listedOwners answers the owner checks from one listing of claims and
// Sandboxes, as the webhook's cache would.
type listedOwners struct {
	byKey map[string]*unstructured.Unstructured
	byNS  map[string][]unstructured.Unstructured
}

// listOwners reads every owner a per-sandbox policy in scope may name: the
// claims, and the Sandboxes, listed again without the selector when one
// narrowed the audited Sandboxes.
func listOwners(ctx context.Context, c Clients, ns string, sandboxes []unstructured.Unstructured, selected bool) (*listedOwners, error) {
	claims, err := listAll(ctx, c, claimGVR, ns, "")
	if err != nil {
		return nil, err
	}
	if selected {
		if sandboxes, err = listAll(ctx, c, sandboxGVR, ns, ""); err != nil {
			return nil, err
		}
	}
	return newListedOwners(claims, sandboxes), nil
}

func newListedOwners(claims, sandboxes []unstructured.Unstructured) *listedOwners {
	l := &listedOwners{byKey: map[string]*unstructured.Unstructured{}, byNS: map[string][]unstructured.Unstructured{}}
	for _, set := range []struct {
		k     admit.OwnerKind
		items []unstructured.Unstructured
	}{{admit.ClaimOwner, claims}, {admit.SandboxOwner, sandboxes}} {
		for i := range set.items {
			o := set.items[i].DeepCopy()
			o.SetGroupVersionKind(set.k.GVK)
			l.byKey[set.k.GVK.Kind+"/"+o.GetNamespace()+"/"+o.GetName()] = o
			l.byNS[set.k.GVK.Kind+"/"+o.GetNamespace()] = append(l.byNS[set.k.GVK.Kind+"/"+o.GetNamespace()], *o)
		}
	}
	return l
}

func (l *listedOwners) GetOwner(_ context.Context, k admit.OwnerKind, ns, name string, _ admit.Expected) (*unstructured.Unstructured, error) {
	if o, ok := l.byKey[k.GVK.Kind+"/"+ns+"/"+name]; ok {
		return o, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: k.GVK.Group, Resource: strings.ToLower(k.GVK.Kind) + "s"}, name)
}

func (l *listedOwners) OwnersLabelled(_ context.Context, k admit.OwnerKind, ns, key, value string) ([]unstructured.Unstructured, error) {
	return k.Labelled(l.byNS[k.GVK.Kind+"/"+ns], key, value), nil
}
