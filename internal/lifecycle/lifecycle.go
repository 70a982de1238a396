// Package lifecycle installs, upgrades and uninstalls the rendered bundle
// (`kubectl kustomize config/default`, or a release's install.yaml) in an
// order that never leaves the cluster half-enforcing (docs/install.md,
// Install, Upgrade and Uninstall; `kubectl fence install|uninstall` runs
// it):
//
//   - a fail-closed webhook configuration never exists without a webhook
//     that answers: it is applied after the Deployment is available, and
//     deleted before the Deployment;
//   - a binding never exists without its policy and its FenceConfig: it is
//     applied after both, and deleted before both;
//   - nothing is written on a cluster the policies do not support, or
//     without the APIs the fence guards (Preflight).
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/internal/kubeversion"
	"github.com/sandbox-fence/sandbox-fence/internal/webhook"
)

// Step is one stage of an install or uninstall: its objects are written
// (or deleted) together, and the next step starts only once they are in
// effect (or gone).
type Step struct {
	Name    string
	Objects []*unstructured.Unstructured
}

const (
	kindCRD       = "CustomResourceDefinition"
	kindVWC       = "ValidatingWebhookConfiguration"
	kindBinding   = "ValidatingAdmissionPolicyBinding"
	kindPolicy    = "ValidatingAdmissionPolicy"
	kindNamespace = "Namespace"
)

func isFenceConfig(o *unstructured.Unstructured) bool {
	return o.GroupVersionKind().GroupKind() == schema.GroupKind{Group: fencev1alpha1.Group, Kind: "FenceConfig"}
}

// classify puts every object in one class, in install order.
const (
	classCRD = iota
	classNamespace
	classWorkload // the webhook's Deployment, Service, RBAC, ... and anything else
	classConfig   // FenceConfig
	classPolicy
	classBinding
	classWebhookConfig
	classCount
)

var classNames = [classCount]string{"CRDs", "namespaces", "the webhook workload", "FenceConfig", "policies", "policy bindings", "webhook configurations"}

func class(o *unstructured.Unstructured) int {
	switch {
	case o.GetKind() == kindCRD:
		return classCRD
	case o.GetKind() == kindNamespace:
		return classNamespace
	case isFenceConfig(o):
		return classConfig
	case o.GetKind() == kindPolicy:
		return classPolicy
	case o.GetKind() == kindBinding:
		return classBinding
	case o.GetKind() == kindVWC:
		return classWebhookConfig
	}
	return classWorkload
}

func byClass(objs []*unstructured.Unstructured) [classCount][]*unstructured.Unstructured {
	var out [classCount][]*unstructured.Unstructured
	for _, o := range objs {
		c := class(o)
		out[c] = append(out[c], o)
	}
	return out
}

// InstallPlan is the install (and upgrade) order: CRDs (established),
// namespaces, the webhook workload (Deployment available), the FenceConfig,
// policies, bindings (each after its policy and FenceConfig), and the
// webhook configuration last, once the webhook answers.
func InstallPlan(objs []*unstructured.Unstructured) []Step {
	c := byClass(objs)
	var steps []Step
	for i := range classCount {
		if len(c[i]) > 0 {
			steps = append(steps, Step{Name: classNames[i], Objects: c[i]})
		}
	}
	return steps
}

// UninstallPlan is the reverse: the webhook configuration first (so a
// fail-closed webhook never outlives its pods), bindings (so none outlives
// its policy or FenceConfig), policies, the webhook workload and its
// namespace (pods keep serving through their preStop and drain, longer
// than the API servers take to drop the deleted configuration), FenceConfig
// objects, and the CRDs last.
func UninstallPlan(objs []*unstructured.Unstructured) []Step {
	c := byClass(objs)
	order := []int{classWebhookConfig, classBinding, classPolicy, classWorkload, classNamespace, classConfig, classCRD}
	var steps []Step
	for _, i := range order {
		if len(c[i]) > 0 {
			steps = append(steps, Step{Name: classNames[i], Objects: c[i]})
		}
	}
	return steps
}

// Runner executes a plan with an admin's clients.
type Runner struct {
	Dynamic   dynamic.Interface
	Discovery discovery.DiscoveryInterface
	// Mapper maps kinds to resources; reset after the CRDs are installed.
	Mapper meta.ResettableRESTMapper
	// FieldManager of the server-side applies; "sandbox-fence-install" when
	// empty.
	FieldManager string
	// WebhookReady waits until the webhook answers before its configuration
	// is applied. nil waits for every rendered Deployment to be Available
	// with its current generation.
	WebhookReady func(ctx context.Context, deployments []*unstructured.Unstructured) error
	// Timeout bounds each wait; 5 minutes when zero.
	Timeout time.Duration
	// Logf reports progress; may be nil.
	Logf func(format string, args ...any)
	// BeforeStep, when set, runs before each step (tests observe the order
	// with it).
	BeforeStep func(ctx context.Context, s Step) error
	// AfterStep, when set, runs after each step has taken effect.
	AfterStep func(ctx context.Context, s Step) error
}

func (r *Runner) logf(format string, args ...any) {
	if r.Logf != nil {
		r.Logf(format, args...)
	}
}

func (r *Runner) timeout() time.Duration {
	if r.Timeout == 0 {
		return 5 * time.Minute
	}
	return r.Timeout
}

// Preflight refuses, before anything is written, a cluster older than
// kubeversion.Minimum (its API server would refuse the policies' CEL
// half-way through an install) or one that does not serve the APIs the
// fence guards (the agent-sandbox and Cilium CRDs; the FenceConfig CRD is
// part of the bundle).
func (r *Runner) Preflight(ctx context.Context) error {
	info, err := r.Discovery.ServerVersion()
	if err != nil {
		return fmt.Errorf("preflight: reading the server's version: %w", err)
	}
	if err := kubeversion.Check(info.GitVersion); err != nil {
		return fmt.Errorf("preflight: nothing installed: %w", err)
	}
	var external []webhook.Prerequisite
	for _, p := range webhook.Prerequisites {
		if p.GVR.Group != fencev1alpha1.Group {
			external = append(external, p)
		}
	}
	missing, err := webhook.MissingPrerequisites(r.Discovery, external)
	if err != nil {
		return fmt.Errorf("preflight: %w", err)
	}
	if perr := webhook.PrerequisitesError(missing); perr != nil {
		return fmt.Errorf("preflight: nothing installed: %w", perr)
	}
	r.logf("preflight: Kubernetes %s (%s or later supported); agent-sandbox and Cilium CRDs served", info.GitVersion, kubeversion.Minimum)
	return nil
}

// Install runs Preflight, then applies objs step by step (InstallPlan). On
// an installed bundle it is the upgrade: each object is server-side applied
// over the old one in the same order.
func (r *Runner) Install(ctx context.Context, objs []*unstructured.Unstructured) error {
	if err := r.Preflight(ctx); err != nil {
		return err
	}
	for _, s := range InstallPlan(objs) {
		if r.BeforeStep != nil {
			if err := r.BeforeStep(ctx, s); err != nil {
				return err
			}
		}
		if s.Objects[0].GetKind() == kindBinding {
			if err := r.waitParamKindMapped(ctx, objs); err != nil {
				return err
			}
		}
		if s.Objects[0].GetKind() == kindVWC {
			if err := r.webhookReady(ctx, objs); err != nil {
				return fmt.Errorf("not applying the webhook configuration: the webhook does not answer: %w", err)
			}
		}
		r.logf("install: %s (%d)", s.Name, len(s.Objects))
		for _, o := range s.Objects {
			if err := r.apply(ctx, o); err != nil {
				return err
			}
		}
		if s.Objects[0].GetKind() == kindCRD {
			if err := r.waitEstablished(ctx, s.Objects); err != nil {
				return err
			}
			r.Mapper.Reset()
		}
		if r.AfterStep != nil {
			if err := r.AfterStep(ctx, s); err != nil {
				return err
			}
		}
	}
	return nil
}

// Uninstall deletes objs step by step (UninstallPlan), waiting until each
// step's objects are gone; before the CRDs go, every FenceConfig left in
// the cluster (not only the rendered one) is deleted too.
func (r *Runner) Uninstall(ctx context.Context, objs []*unstructured.Unstructured) error {
	for _, s := range UninstallPlan(objs) {
		if s.Objects[0].GetKind() == kindCRD {
			if err := r.deleteEveryFenceConfig(ctx); err != nil {
				return err
			}
		}
		if r.BeforeStep != nil {
			if err := r.BeforeStep(ctx, s); err != nil {
				return err
			}
		}
		r.logf("uninstall: %s (%d)", s.Name, len(s.Objects))
		for _, o := range s.Objects {
			if err := r.delete(ctx, o); err != nil {
				return err
			}
		}
		if err := r.waitGone(ctx, s.Objects); err != nil {
			return err
		}
		if r.AfterStep != nil {
			if err := r.AfterStep(ctx, s); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *Runner) resource(o *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := o.GroupVersionKind()
	m, err := r.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		r.Mapper.Reset()
		m, err = r.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", gvk.Kind, o.GetName(), err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return r.Dynamic.Resource(m.Resource).Namespace(o.GetNamespace()), nil
	}
	return r.Dynamic.Resource(m.Resource), nil
}

func (r *Runner) apply(ctx context.Context, o *unstructured.Unstructured) error {
	ri, err := r.resource(o)
	if err != nil {
		return err
	}
	fm := r.FieldManager
	if fm == "" {
		fm = "sandbox-fence-install"
	}
	if _, err := ri.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: fm, Force: true}); err != nil {
		return fmt.Errorf("applying %s %s: %w", o.GetKind(), name(o), err)
	}
	return nil
}

func (r *Runner) delete(ctx context.Context, o *unstructured.Unstructured) error {
	ri, err := r.resource(o)
	if meta.IsNoMatchError(errors.Unwrap(err)) || meta.IsNoMatchError(err) {
		return nil // its CRD is gone already: so is the object
	}
	if err != nil {
		return err
	}
	bg := metav1.DeletePropagationBackground
	if err := ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %s %s: %w", o.GetKind(), name(o), err)
	}
	return nil
}

func (r *Runner) deleteEveryFenceConfig(ctx context.Context) error {
	ri := r.Dynamic.Resource(fencev1alpha1.GroupVersionResource)
	list, err := ri.List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing FenceConfigs: %w", err)
	}
	var objs []*unstructured.Unstructured
	for i := range list.Items {
		objs = append(objs, &list.Items[i])
	}
	if len(objs) == 0 {
		return nil
	}
	r.logf("uninstall: every FenceConfig (%d)", len(objs))
	for _, o := range objs {
		if err := ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting FenceConfig %s: %w", o.GetName(), err)
		}
	}
	return r.waitGone(ctx, objs)
}

func (r *Runner) waitGone(ctx context.Context, objs []*unstructured.Unstructured) error {
	left := slices.Clone(objs)
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, r.timeout(), true, func(ctx context.Context) (bool, error) {
		var still []*unstructured.Unstructured
		for _, o := range left {
			ri, err := r.resource(o)
			if err != nil {
				continue // no mapping: its CRD, and so the object, is gone
			}
			if _, err := ri.Get(ctx, o.GetName(), metav1.GetOptions{}); err == nil {
				still = append(still, o)
			} else if !apierrors.IsNotFound(err) {
				return false, err
			}
		}
		left = still
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d objects to be gone (first: %s %s): %w", len(left), kindOf(left), nameOf(left), err)
	}
	return nil
}

func (r *Runner) waitEstablished(ctx context.Context, crds []*unstructured.Unstructured) error {
	for _, c := range crds {
		ri, err := r.resource(c)
		if err != nil {
			return err
		}
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, r.timeout(), true, func(ctx context.Context) (bool, error) {
			got, err := ri.Get(ctx, c.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return conditionTrue(got, "Established"), nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s not Established: %w", c.GetName(), err)
		}
	}
	return nil
}

func (r *Runner) webhookReady(ctx context.Context, objs []*unstructured.Unstructured) error {
	var deps []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "Deployment" {
			deps = append(deps, o)
		}
	}
	if r.WebhookReady != nil {
		return r.WebhookReady(ctx, deps)
	}
	for _, d := range deps {
		ri, err := r.resource(d)
		if err != nil {
			return err
		}
		r.logf("install: waiting for Deployment %s to be available", name(d))
		err = wait.PollUntilContextTimeout(ctx, time.Second, r.timeout(), true, func(ctx context.Context) (bool, error) {
			got, err := ri.Get(ctx, d.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			var dep appsv1.Deployment
			if err := unstructuredTo(got, &dep); err != nil {
				return false, err
			}
			want := int32(1)
			if dep.Spec.Replicas != nil {
				want = *dep.Spec.Replicas
			}
			return dep.Status.ObservedGeneration >= dep.Generation && dep.Status.UpdatedReplicas == want &&
				dep.Status.AvailableReplicas == want && dep.Status.Replicas == want, nil
		})
		if err != nil {
			return fmt.Errorf("Deployment %s: %w", name(d), err)
		}
	}
	return nil
}

func conditionTrue(o *unstructured.Unstructured, typ string) bool {
	conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ && m["status"] == "True" {
			return true
		}
	}
	return false
}

func name(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}.String()
}

func unstructuredTo(u *unstructured.Unstructured, out any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out)
}

func kindOf(objs []*unstructured.Unstructured) string {
	if len(objs) == 0 {
		return ""
	}
	return objs[0].GetKind()
}

func nameOf(objs []*unstructured.Unstructured) string {
	if len(objs) == 0 {
		return ""
	}
	return name(objs[0])
}

// The probe of waitParamKindMapped.
const (
	probeName    = "sandbox-fence-install-probe"
	probeMapped  = "no params found"
	probeTimeout = 2 * time.Minute
)

// waitParamKindMapped waits until the API server's admission plugin can
// resolve the FenceConfig kind, before any binding of a policy with that
// paramKind exists. Why: the plugin maps kinds through a discovery cache
// it refreshes every 30 seconds, and until then it fails every policy whose
// paramKind is a kind it has not seen, before looking at match conditions
// (docs/install.md, the start-up window): a binding applied right after the
// FenceConfig CRD is created would refuse every CiliumNetworkPolicy write
// in opted-in namespaces, anyone's, for up to 30 seconds (seen by
// TestInstallUpgradeUninstallNeverRefusesBystanders). The probe is a policy
// with that paramKind matching nothing but a dry-run create of one
// ConfigMap name in the bundle's namespace, bound to a FenceConfig that does
// not exist with parameterNotFoundAction Deny: its refusal says "no params
// found" once the kind is mapped, and "failed to find resource referenced
// by paramKind" before. Three such refusals in a row (API servers behind a
// load balancer each have their own cache), then the probe is deleted.
func (r *Runner) waitParamKindMapped(ctx context.Context, objs []*unstructured.Unstructured) error {
	ns := "default"
	for _, o := range objs {
		if o.GetKind() == kindNamespace {
			ns = o.GetName()
			break
		}
	}
	policy := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": kindPolicy,
		"metadata": map[string]any{"name": probeName},
		"spec": map[string]any{
			"failurePolicy": "Fail",
			"paramKind":     map[string]any{"apiVersion": fencev1alpha1.GroupVersion.String(), "kind": "FenceConfig"},
			"matchConstraints": map[string]any{
				"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": ns}},
				"resourceRules": []any{map[string]any{
					"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "resources": []any{"configmaps"},
					"operations": []any{"CREATE"}, "resourceNames": []any{probeName},
				}},
			},
			"validations": []any{map[string]any{"expression": "false", "message": "sandbox-fence install probe"}},
		},
	}}
	binding := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": kindBinding,
		"metadata": map[string]any{"name": probeName},
		"spec": map[string]any{
			"policyName":        probeName,
			"validationActions": []any{"Deny"},
			"paramRef":          map[string]any{"name": probeName + "-absent", "parameterNotFoundAction": "Deny"},
		},
	}}
	probe := []*unstructured.Unstructured{policy, binding}
	for _, o := range probe {
		if err := r.apply(ctx, o); err != nil {
			return err
		}
	}
	defer func() {
		for _, o := range []*unstructured.Unstructured{binding, policy} {
			_ = r.delete(context.WithoutCancel(ctx), o)
		}
	}()
	r.logf("install: waiting until the API server maps the FenceConfig kind for admission (up to its 30 s discovery refresh)")
	cms := r.Dynamic.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace(ns)
	cm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": probeName, "namespace": ns}}}
	inARow := 0
	var last string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, probeTimeout, true, func(ctx context.Context) (bool, error) {
		_, err := cms.Create(ctx, cm, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case err == nil:
			last = "admitted (the probe is not in effect yet)"
			inARow = 0
		case strings.Contains(err.Error(), probeMapped):
			inARow++
		default:
			last = err.Error()
			inARow = 0
		}
		return inARow >= 3, nil
	})
	if err != nil {
		return fmt.Errorf("the API server does not map the FenceConfig kind for admission after %s (last: %s): %w", probeTimeout, last, err)
	}
	return r.waitGoneAfterDelete(ctx, probe)
}

// waitGoneAfterDelete deletes objs and waits until they are gone.
func (r *Runner) waitGoneAfterDelete(ctx context.Context, objs []*unstructured.Unstructured) error {
	for i := len(objs) - 1; i >= 0; i-- {
		if err := r.delete(ctx, objs[i]); err != nil {
			return err
		}
	}
	return r.waitGone(ctx, objs)
}
