// Package fencectl is what `kubectl fence` does (cmd/kubectl-fence is its
// wiring): audit what already exists against the installed fence, show one
// Sandbox's fencing state, and check an installation. Everything is read
// with the caller's credentials; nothing is written but the policy
// reports of WriteReports, which the in-cluster reports CronJob
// (config/components/policy-reports) writes.
package fencectl

import (
	"context"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/internal/enforcement"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// Clients are what every command reads through.
type Clients struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
}

// Options name the installation: the FenceConfig and the prefix a
// namePrefix install put before every policy name (docs/install.md).
type Options struct {
	ConfigName   string
	PolicyPrefix string
}

// BundleLabel is the label every shipped policy and binding carries; it
// survives a kustomize rename, so the installed policies are found by it.
const BundleLabel = "app.kubernetes.io/name=sandbox-fence"

// Shipped policy names (before any prefix).
const (
	PolicyHolderEpoch       = "sandbox-fence-holder-epoch"
	PolicyHolderEpochRepair = "sandbox-fence-holder-epoch-repair"
	PolicyCiliumEgress      = "sandbox-fence-cilium-egress"
	PolicyCiliumOwner       = "sandbox-fence-cilium-owner"
	// PolicyStrictDelete is installed unbound; the opt-in component
	// config/vap/components/strict-delete binds it, since strict delete is
	// off unless an admin turns it on.
	PolicyStrictDelete = "sandbox-fence-strict-delete"
)

// ShippedPolicies are the four policies config/vap installs and binds.
var ShippedPolicies = []string{PolicyHolderEpoch, PolicyHolderEpochRepair, PolicyCiliumEgress, PolicyCiliumOwner}

var (
	sandboxGVR     = fence.SandboxGVR
	claimGVR       = fence.SandboxClaimGVR
	cnpGVR         = fence.CiliumNetworkPolicyGVR
	fenceConfigGVR = fencev1alpha1.GroupVersionResource
)

// installed is the fence as the cluster has it.
type installed struct {
	policies []admissionregistrationv1.ValidatingAdmissionPolicy
	// bindings are those of the installed policies; allBindings every
	// binding in the cluster (a binding may outlive its policy).
	bindings    []admissionregistrationv1.ValidatingAdmissionPolicyBinding
	allBindings []admissionregistrationv1.ValidatingAdmissionPolicyBinding
	// configs are the FenceConfigs read, by name.
	configs map[string]*unstructured.Unstructured
	// config is the one named by Options.ConfigName, nil when absent.
	config     *fencev1alpha1.FenceConfig
	namespaces []corev1.Namespace
}

func readInstalled(ctx context.Context, c Clients, o Options) (*installed, error) {
	in := &installed{configs: map[string]*unstructured.Unstructured{}}
	ar := c.Kube.AdmissionregistrationV1()
	pols, err := ar.ValidatingAdmissionPolicies().List(ctx, metav1.ListOptions{LabelSelector: BundleLabel})
	if err != nil {
		return nil, fmt.Errorf("listing ValidatingAdmissionPolicies: %w", err)
	}
	in.policies = pols.Items
	bs, err := ar.ValidatingAdmissionPolicyBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing ValidatingAdmissionPolicyBindings: %w", err)
	}
	in.allBindings = bs.Items
	names := map[string]bool{}
	for _, p := range in.policies {
		names[p.Name] = true
	}
	for _, b := range bs.Items {
		if names[b.Spec.PolicyName] {
			in.bindings = append(in.bindings, b)
		}
	}
	for _, name := range []string{o.ConfigName} {
		u, err := c.Dynamic.Resource(fenceConfigGVR).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading FenceConfig %q: %w", name, err)
		}
		in.configs[name] = u
	}
	if u := in.configs[o.ConfigName]; u != nil {
		cfg := &fencev1alpha1.FenceConfig{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, cfg); err != nil {
			return nil, fmt.Errorf("FenceConfig %q: %w", o.ConfigName, err)
		}
		in.config = cfg
	}
	nss, err := c.Kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing Namespaces: %w", err)
	}
	in.namespaces = nss.Items
	return in, nil
}

// optedIn reports whether the namespace carries the opt-in label.
func optedIn(ns *corev1.Namespace) bool {
	return ns.Labels[fencev1alpha1.FencedNamespaceLabel] == fencev1alpha1.FencedNamespaceValue
}

// mode is the enforcement mode the installed bindings share; "" with a
// description when they disagree or carry a set no mode produces.
func (in *installed) mode() (enforcement.Mode, string) {
	modes := map[enforcement.Mode][]string{}
	var odd []string
	for _, b := range in.bindings {
		m, ok := enforcement.Of(b.Spec.ValidationActions)
		if !ok {
			odd = append(odd, fmt.Sprintf("%s %v", b.Name, b.Spec.ValidationActions))
			continue
		}
		modes[m] = append(modes[m], b.Name)
	}
	if len(odd) == 0 && len(modes) == 1 {
		for m := range modes {
			return m, ""
		}
	}
	var parts []string
	for _, m := range enforcement.Modes {
		if len(modes[m]) > 0 {
			parts = append(parts, fmt.Sprintf("%s: %s", m, strings.Join(modes[m], ", ")))
		}
	}
	if len(odd) > 0 {
		parts = append(parts, "no mode: "+strings.Join(odd, ", "))
	}
	if len(parts) == 0 {
		return "", "no bindings"
	}
	return "", strings.Join(parts, "; ")
}

func listAll(ctx context.Context, c Clients, gvr schema.GroupVersionResource, ns, selector string) ([]unstructured.Unstructured, error) {
	var out []unstructured.Unstructured
	opts := metav1.ListOptions{Limit: 500, LabelSelector: selector}
	for {
		l, err := c.Dynamic.Resource(gvr).Namespace(ns).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", gvr.GroupResource(), err)
		}
		out = append(out, l.Items...)
		if l.GetContinue() == "" {
			return out, nil
		}
		opts.Continue = l.GetContinue()
	}
}
