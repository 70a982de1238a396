// Package controller keeps the objects FenceConfig is rendered into
// (internal/policyconfig) current: it runs in the webhook binary, on the
// elected leader, and a replica that loses the Lease keeps serving
// admission (Leader).
package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/internal/policyconfig"
)

// Reconciler keeps the policies labelled policyconfig.RenderLabel=<ConfigName> and the
// webhook configuration WebhookConfigName rendered from the FenceConfig
// ConfigName, and reports on the FenceConfig's Rendered condition. It
// writes only the fields it owns (server-side apply as policyconfig.FieldManager), so
// an admin's kubectl apply or helm upgrade of the shipped objects, which
// declare the placeholders, leaves them rendered.
type Reconciler struct {
	Client            client.Client
	ConfigName        string
	WebhookConfigName string
	// PolicyRefresh is how long a closing render waits between the
	// policies and the routing (DefaultPolicyRefresh when zero).
	PolicyRefresh time.Duration
}

// DefaultPolicyRefresh outlasts the API server's refresh of its policies: it
// takes up a webhook configuration at once, but a changed policy only at its
// next refresh, once a second (k8s.io/apiserver's generic policy source).
// A wait, not a poll: the only sign of the refresh is a bound host's write
// being refused, which the controller could see only by impersonating a
// host.
const DefaultPolicyRefresh = 1500 * time.Millisecond

// SetupWithManager adds the controller to mgr. Every event, of the
// FenceConfig, a labelled policy or the webhook configuration, renders
// everything again. With lock, it runs only while this replica holds the
// Lease (Leader); without, on this replica alone.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, lock resourcelock.Interface) error {
	if lock == nil {
		c, err := r.newController(mgr)
		if err != nil {
			return err
		}
		return mgr.Add(c)
	}
	return mgr.Add(&Leader{Lock: lock, Run: func(ctx context.Context) error {
		c, err := r.newController(mgr)
		if err != nil {
			return err
		}
		return c.Start(ctx)
	}})
}

// newController returns the controller for one term: controller-runtime
// starts a controller once, so each term of leadership gets its own.
func (r *Reconciler) newController(mgr ctrl.Manager) (controller.Controller, error) {
	c, err := controller.NewUnmanaged("fenceconfig-render", controller.Options{
		Reconciler:         r,
		Logger:             mgr.GetLogger(),
		SkipNameValidation: ptr.To(true),
	})
	if err != nil {
		return nil, err
	}
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: r.ConfigName}}}
	})
	ours := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == r.ConfigName })
	for _, src := range []source.Source{
		source.Kind(mgr.GetCache(), client.Object(&fencev1alpha1.FenceConfig{}), &handler.EnqueueRequestForObject{}, ours),
		source.Kind(mgr.GetCache(), client.Object(&admissionregistrationv1.ValidatingAdmissionPolicy{}), all),
		source.Kind(mgr.GetCache(), client.Object(&admissionregistrationv1.ValidatingWebhookConfiguration{}), all),
	} {
		if err := c.Watch(src); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Selector selects the policies rendered from the FenceConfig name.
func Selector(name string) labels.Selector {
	return labels.SelectorFromSet(labels.Set{policyconfig.RenderLabel: name})
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	log := logf.FromContext(ctx)
	cfg := &fencev1alpha1.FenceConfig{}
	err := r.Client.Get(ctx, types.NamespacedName{Name: r.ConfigName}, cfg)
	switch {
	case apierrors.IsNotFound(err):
		cfg = nil
	case err != nil:
		return reconcile.Result{}, err
	}
	c := policyconfig.FromFenceConfig(r.ConfigName, cfg)

	rendered, problems, err := r.render(ctx, c)
	if err != nil {
		return reconcile.Result{}, err
	}
	if len(rendered) > 0 {
		log.Info("rendered", "config", r.ConfigName, "state", c.State, "generation", c.Generation, "objects", rendered)
	}
	if cfg == nil {
		return reconcile.Result{}, nil
	}
	if err := r.report(ctx, cfg, c, problems); err != nil {
		return reconcile.Result{}, err
	}
	if len(problems) > 0 {
		// A policy the controller may not write (RBAC) or that failed to
		// apply: try again, backing off, and say so on the condition.
		return reconcile.Result{RequeueAfter: 30 * time.Second}, nil
	}
	return reconcile.Result{}, nil
}

// render applies c wherever it is not in force yet, in the order that never
// opens the fence; it returns what it changed and what it could not render.
//
// The webhook configuration routes the bound hosts' writes to the owner
// check; the policies admit them. A configuration that routes some host
// opens: the routing is written first, so no policy admits a host before
// its writes reach the owner check. In the other order an upgrade, whose
// apply ships both unrendered, let a bound host's policy for a missing
// owner through between the two writes (seen on kind: 3 admitted). A
// configuration that routes nobody (missing, invalid) closes: the policies
// are written first and refuse, and the routing stops only once the API
// server has taken them up (PolicyRefresh). A host a change drops from the
// routing first is a host the change unfences anyway.
func (r *Reconciler) render(ctx context.Context, c policyconfig.Config) (changed, problems []string, err error) {
	closing := c.MatchConditionExpression() == policyconfig.RoutesNobody
	first, second := r.renderWebhook, r.renderPolicies
	if closing {
		first, second = second, first
	}
	changed, problems, err = first(ctx, c)
	if err != nil {
		return changed, problems, err
	}
	if closing && len(changed) > 0 {
		select {
		case <-ctx.Done():
			return changed, problems, ctx.Err()
		case <-time.After(cmp.Or(r.PolicyRefresh, DefaultPolicyRefresh)):
		}
	}
	more, moreProblems, err := second(ctx, c)
	return append(changed, more...), append(problems, moreProblems...), err
}

// renderWebhook renders c into the webhook configuration's match conditions.
func (r *Reconciler) renderWebhook(ctx context.Context, c policyconfig.Config) (changed, problems []string, err error) {
	if r.WebhookConfigName != "" {
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		err := r.Client.Get(ctx, types.NamespacedName{Name: r.WebhookConfigName}, vwc)
		switch {
		case apierrors.IsNotFound(err):
			problems = append(problems, fmt.Sprintf("ValidatingWebhookConfiguration %s not found", r.WebhookConfigName))
		case err != nil:
			return nil, problems, err
		default:
			var stale []string
			for w, got := range policyconfig.WebhookExpressions(vwc) {
				if got != c.MatchConditionExpression() {
					stale = append(stale, w)
				}
			}
			slices.Sort(stale)
			if len(stale) > 0 {
				if err := r.Client.Apply(ctx, policyconfig.WebhookApplyConfiguration(r.WebhookConfigName, stale, c), client.FieldOwner(policyconfig.FieldManager), client.ForceOwnership); err != nil {
					problems = append(problems, fmt.Sprintf("ValidatingWebhookConfiguration %s: %v", r.WebhookConfigName, err))
				} else {
					changed = append(changed, "ValidatingWebhookConfiguration/"+r.WebhookConfigName)
				}
			}
		}
	}
	return changed, problems, nil
}

// renderPolicies renders c into every policy labelled for the FenceConfig.
func (r *Reconciler) renderPolicies(ctx context.Context, c policyconfig.Config) (changed, problems []string, err error) {
	policies := &admissionregistrationv1.ValidatingAdmissionPolicyList{}
	if err := r.Client.List(ctx, policies, client.MatchingLabelsSelector{Selector: Selector(r.ConfigName)}); err != nil {
		return nil, nil, err
	}
	want := c.Expression()
	found := 0
	for i := range policies.Items {
		p := &policies.Items[i]
		got, ok := policyconfig.PolicyExpression(p)
		if !ok {
			problems = append(problems, fmt.Sprintf("ValidatingAdmissionPolicy %s is labelled %s=%s but declares no variable %q", p.Name, policyconfig.RenderLabel, r.ConfigName, policyconfig.Variable))
			continue
		}
		found++
		if got == want {
			continue
		}
		if err := r.Client.Apply(ctx, policyconfig.PolicyApplyConfiguration(p.Name, c), client.FieldOwner(policyconfig.FieldManager), client.ForceOwnership); err != nil {
			problems = append(problems, fmt.Sprintf("ValidatingAdmissionPolicy %s: %v", p.Name, err))
			continue
		}
		changed = append(changed, "ValidatingAdmissionPolicy/"+p.Name)
	}
	if found == 0 {
		problems = append(problems, fmt.Sprintf("no ValidatingAdmissionPolicy is labelled %s=%s: is the bundle installed?", policyconfig.RenderLabel, r.ConfigName))
	}
	return changed, problems, nil
}

// report sets the FenceConfig's Rendered condition.
func (r *Reconciler) report(ctx context.Context, cfg *fencev1alpha1.FenceConfig, c policyconfig.Config, problems []string) error {
	cond := metav1.Condition{Type: fencev1alpha1.ConditionRendered, ObservedGeneration: cfg.Generation}
	switch {
	case c.State == policyconfig.Invalid:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "InvalidConfig",
			c.Reason+"; until then the egress policy refuses every ServiceAccount's policy writes in opted-in namespaces"
	case len(problems) > 0:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "RenderFailed", strings.Join(problems, "; ")
	default:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, "Rendered", "every policy and the webhook configuration enforce this generation"
		if conflicts := c.Conflicts(); len(conflicts) > 0 {
			cond.Reason = "NamespaceConflict"
			cond.Message += fmt.Sprintf("; namespaces listed by more than one host, where every host's policy writes are refused (contract §4.7): %s",
				strings.Join(conflicts, ", "))
		}
	}
	if len(cond.Message) > 32768 {
		cond.Message = cond.Message[:32765] + "..."
	}
	old := apimeta.FindStatusCondition(cfg.Status.Conditions, cond.Type)
	if old != nil && old.Status == cond.Status && old.Reason == cond.Reason && old.Message == cond.Message && old.ObservedGeneration == cond.ObservedGeneration {
		return nil
	}
	patch := client.MergeFrom(cfg.DeepCopy())
	apimeta.SetStatusCondition(&cfg.Status.Conditions, cond)
	if err := r.Client.Status().Patch(ctx, cfg, patch); err != nil && !apierrors.IsNotFound(err) {
		return errors.Join(errors.New("reporting the Rendered condition"), err)
	}
	return nil
}
