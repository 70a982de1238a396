// Command webhook serves sandbox-fence's validating admission webhook: the
// checks of contract §4.4 items 1-3 and strict delete (contract §8.4), which need the
// live state of other objects and so cannot be ValidatingAdmissionPolicies.
// It is wiring only; the rules are in internal/admit and the admission
// handlers in internal/webhook.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/internal/admit"
	"github.com/sandbox-fence/sandbox-fence/internal/webhook"
)

func main() {
	o := bindFlags(flag.CommandLine)
	flag.Parse()
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	level, _ := o.slogLevel()
	log := logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctrl.SetLogger(log)
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	ctx, draining := shutdownContext(sig, o.shutdownDrain)
	if err := run(ctx, o, draining, log.WithName("setup")); err != nil {
		log.Error(err, "exiting")
		os.Exit(1)
	}
}

func ownerObject(k admit.OwnerKind) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(k.GVK)
	return u
}

func run(ctx context.Context, o *options, draining *atomic.Bool, log logr.Logger) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := fencev1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	restConfig, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("no Kubernetes client configuration (--kubeconfig, or in-cluster): %w", err)
	}

	claim, sandbox := ownerObject(admit.ClaimOwner), ownerObject(admit.SandboxOwner)
	mgr, err := ctrl.NewManager(restConfig, manager.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress:  o.probeAddr,
		GracefulShutdownTimeout: &o.gracefulShutdown,
		// Owners are cached in ALL namespaces. The fenced namespaces come
		// from the FenceConfig and change at run time, and a cache's
		// namespace set is fixed when it starts; a restart on every
		// configuration change would drop requests. Objects are trimmed to
		// what the rules read (webhook.TrimOwner), so memory grows with the
		// number of claims and Sandboxes, not their PodSpecs. Only the one
		// FenceConfig the webhook is configured with is cached.
		Cache: cache.Options{
			DefaultTransform: cache.TransformStripManagedFields(),
			ByObject: map[client.Object]cache.ByObject{
				claim:                        {Transform: webhook.TrimOwner(admit.ClaimOwner)},
				sandbox:                      {Transform: webhook.TrimOwner(admit.SandboxOwner)},
				&fencev1alpha1.FenceConfig{}: {Field: fields.OneTermEqualSelector("metadata.name", o.configName)},
			},
			// Reads of anything not registered below fail instead of
			// silently starting a new cluster-wide informer.
			ReaderFailOnMissingInformer: true,
		},
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	// Registering the informers now makes the readiness check wait for their
	// first sync, and fails fast with a clear error when a CRD is missing.
	for _, obj := range []client.Object{claim, sandbox, &fencev1alpha1.FenceConfig{}} {
		if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
			gvk, _ := mgr.GetClient().GroupVersionKindFor(obj)
			return fmt.Errorf("watching %s (is its CRD installed?): %w", gvk, err)
		}
	}

	m := webhook.NewMetrics(metrics.Registry)
	cfg := webhook.ConfigSource{Reader: mgr.GetCache(), Name: o.configName}
	srv := ctrlwebhook.NewServer(ctrlwebhook.Options{
		Host:    o.bindAddress,
		Port:    o.port,
		CertDir: o.certDir,
		TLSOpts: o.tlsOpts(),
	})
	srv.Register(webhook.CiliumEgressPath, closeWhenDraining(&admission.Webhook{Handler: &webhook.CiliumHandler{
		Config:        cfg,
		Owners:        &webhook.OwnerLookup{Cache: mgr.GetCache(), Live: mgr.GetAPIReader(), Metrics: m},
		LookupTimeout: o.lookupTimeout,
		Metrics:       m,
	}}, draining))
	srv.Register(webhook.SandboxDeletePath, closeWhenDraining(&admission.Webhook{Handler: &webhook.SandboxDeleteHandler{
		Config: cfg, LookupTimeout: o.lookupTimeout, Metrics: m,
	}}, draining))

	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	// Ready = the TLS listener answers (so not before the certificate is
	// there) and the informers have synced (so a lookup is not a guess).
	if err := mgr.AddReadyzCheck("webhook", srv.StartedChecker()); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("informers", cacheSynced(mgr.GetCache())); err != nil {
		return err
	}

	if !o.certRotation {
		if err := mgr.Add(srv); err != nil {
			return err
		}
	} else {
		ready := make(chan struct{})
		if err := rotator.AddRotator(mgr, &rotator.CertRotator{
			SecretKey:      types.NamespacedName{Namespace: o.namespace, Name: o.certSecretName},
			CertDir:        o.certDir,
			CAName:         "sandbox-fence-ca",
			CAOrganization: "sandbox-fence",
			DNSName:        fmt.Sprintf("%s.%s.svc", o.serviceName, o.namespace),
			ExtraDNSNames: []string{
				o.serviceName,
				fmt.Sprintf("%s.%s", o.serviceName, o.namespace),
				fmt.Sprintf("%s.%s.svc.cluster.local", o.serviceName, o.namespace),
			},
			IsReady:  ready,
			Webhooks: []rotator.WebhookInfo{{Name: o.webhookConfigName, Type: rotator.Validating}},
			// Every replica keeps the Secret and caBundle current (updates
			// conflict-retry), so no leader election is needed.
			RequireLeaderElection: false,
		}); err != nil {
			return fmt.Errorf("setting up certificate rotation: %w", err)
		}
		// The listener starts only once the rotated certificate is mounted
		// in --cert-dir; until then readyz fails and no traffic arrives.
		go func() {
			select {
			case <-ready:
				log.Info("serving certificate ready; starting the webhook listener")
				if err := mgr.Add(srv); err != nil {
					log.Error(err, "starting the webhook listener")
				}
			case <-ctx.Done():
			}
		}()
	}

	log.Info("starting", "config", o.configName, "port", o.port, "bindAddress", o.bindAddress,
		"certDir", o.certDir, "certRotation", o.certRotation, "tlsMinVersion", o.tlsMinVersion, "lookupTimeout", o.lookupTimeout.String())
	return mgr.Start(ctx)
}

func cacheSynced(c cache.Cache) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), time.Second)
		defer cancel()
		if !c.WaitForCacheSync(ctx) {
			return errors.New("informer caches have not synced yet")
		}
		return nil
	}
}
