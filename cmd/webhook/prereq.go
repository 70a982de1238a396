package main

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fence/sandbox-fence/internal/webhook"
)

// Event reasons of the prerequisite watch, on the webhook's own Pod (or
// Deployment when it runs outside a Pod).
const (
	ReasonPrerequisitesMissing = "PrerequisitesMissing"
	ReasonPrerequisitesMet     = "PrerequisitesMet"
)

// Poll intervals of discovery: short while something is missing, so the
// webhook becomes ready soon after the CRD is established; longer once all
// are there, to notice a CRD removed later.
const (
	prerequisitePollMissing = 2 * time.Second
	prerequisitePollMet     = 15 * time.Second
)

// prerequisiteWatch polls discovery for webhook.Prerequisites, keeps the
// readiness state, records an Event each time the set of missing APIs
// changes, and registers the informers once all are served (from then on
// the cache's own readiness check waits for their sync).
type prerequisiteWatch struct {
	discovery discovery.ServerResourcesInterface
	state     *webhook.PrerequisiteState
	recorder  record.EventRecorder
	self      *corev1.ObjectReference
	informers []client.Object
	cache     cache.Cache
	log       logr.Logger

	last       string
	registered bool
}

// Start implements manager.Runnable.
func (w *prerequisiteWatch) Start(ctx context.Context) error {
	for {
		interval := w.check(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// replica checks for itself.
func (w *prerequisiteWatch) NeedLeaderElection() bool { return false }

func (w *prerequisiteWatch) check(ctx context.Context) time.Duration {
	missing, err := webhook.MissingPrerequisites(w.discovery, webhook.Prerequisites)
	if err != nil {
		// Not a verdict on the CRDs: keep the last one, say why.
		w.log.Error(err, "discovery failed; keeping the last prerequisite state")
		if w.last == "" && !w.registered {
			w.state.Set(err)
		}
		return prerequisitePollMissing
	}
	if perr := webhook.PrerequisitesError(missing); perr != nil {
		w.state.Set(perr)
		if msg := perr.Error(); msg != w.last {
			w.last = msg
			w.log.Error(perr, "not ready")
			w.event(corev1.EventTypeWarning, ReasonPrerequisitesMissing, msg)
		}
		return prerequisitePollMissing
	}
	if !w.registered {
		for _, obj := range w.informers {
			// Blocks until the informer's first sync; a failure is retried
			// at the next poll, the webhook staying not ready meanwhile.
			if _, err := w.cache.GetInformer(ctx, obj); err != nil {
				w.log.Error(err, "starting an informer", "object", client.ObjectKeyFromObject(obj), "type", obj.GetObjectKind().GroupVersionKind().String())
				w.state.Set(err)
				return prerequisitePollMissing
			}
		}
		w.registered = true
	}
	w.state.Set(nil)
	if w.last != "" {
		w.log.Info("prerequisites served; ready")
		w.event(corev1.EventTypeNormal, ReasonPrerequisitesMet, "every prerequisite is served: "+prerequisiteNames())
	}
	w.last = ""
	return prerequisitePollMet
}

func (w *prerequisiteWatch) event(typ, reason, msg string) {
	if w.recorder == nil || w.self == nil {
		return
	}
	w.recorder.Event(w.self, typ, reason, msg)
}

func prerequisiteNames() string {
	s := ""
	for i, p := range webhook.Prerequisites {
		if i > 0 {
			s += ", "
		}
		s += p.GVR.GroupResource().String()
	}
	return s
}

// selfReference is the object the webhook's own Events are about: its Pod
// (--pod-name, from the downward API), else its Deployment.
func (o *options) selfReference() *corev1.ObjectReference {
	if o.namespace == "" {
		return nil
	}
	if o.podName != "" {
		return &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: o.namespace, Name: o.podName, UID: types.UID(o.podUID)}
	}
	return &corev1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Namespace: o.namespace, Name: o.deploymentName}
}
