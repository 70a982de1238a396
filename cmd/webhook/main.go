// Command webhook serves sandbox-fence's validating admission webhook: the
// owner checks of a per-sandbox CiliumNetworkPolicy (docs/contract.md), which
// need the live state of other objects and so cannot be
// ValidatingAdmissionPolicies. While the FenceConfig is missing the webhook
// is routed nobody, and the egress policy refuses the CiliumNetworkPolicy
// writes of every ServiceAccount outside kube-system in opted-in namespaces.
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
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/leaderelection"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/internal/admit"
	"github.com/sandbox-fence/sandbox-fence/internal/enforcement"
	rendercontroller "github.com/sandbox-fence/sandbox-fence/internal/policyconfig/controller"
	"github.com/sandbox-fence/sandbox-fence/internal/webhook"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "lifecycle" {
		os.Exit(runLifecycle(os.Args[2:]))
	}
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

	recorder, stopEvents, err := eventRecorder(restConfig, scheme)
	if err != nil {
		return err
	}
	defer stopEvents()
	// Missing CRDs keep the webhook alive and not ready, saying which,
	// instead of a crash loop (docs/install.md, Prerequisites).
	disc, err := discovery.NewDiscoveryClientForConfig(restConfig)
	if err != nil {
		return err
	}
	if err := waitForPrerequisites(ctx, disc, o.probeAddr, podReference(o.namespace), recorder, log); err != nil {
		if ctx.Err() != nil {
			return nil // asked to stop while waiting
		}
		return err
	}

	claim, sandbox := ownerObject(admit.ClaimOwner), ownerObject(admit.SandboxOwner)
	mode, _ := enforcement.Parse(o.enforcement) // validated with the flags
	watchHealth := &webhook.WatchHealth{}
	mgr, err := ctrl.NewManager(restConfig, manager.Options{
		Scheme: scheme,
		// The metrics server is added below, once its certificate exists.
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  o.probeAddr,
		PprofBindAddress:        o.pprofAddr,
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
				// Namespaces' labels, for hosts bound by namespaceSelector:
				// metadata only and trimmed to the labels, so thousands of
				// namespaces cost little, and no request waits on a GET of
				// its namespace (webhook.CachedNamespaces).
				webhook.NamespaceMeta(): {Transform: webhook.TrimNamespace},
				// What the controller renders into: the policies labelled
				// for this FenceConfig and the one webhook configuration.
				&admissionregistrationv1.ValidatingAdmissionPolicy{}:      {Label: rendercontroller.Selector(o.configName)},
				&admissionregistrationv1.ValidatingWebhookConfiguration{}: {Field: fields.OneTermEqualSelector("metadata.name", o.webhookConfigName)},
				// The rotated serving certificate (certFiles): one Secret.
				&corev1.Secret{}: {
					Namespaces: map[string]cache.Config{o.namespace: {}},
					Field:      fields.OneTermEqualSelector("metadata.name", o.certSecretName),
				},
			},
			// Reads of anything not registered below fail instead of
			// silently starting a new cluster-wide informer.
			ReaderFailOnMissingInformer: true,
			// The owner informers' watches are observed, so that their cache
			// admits only while it is current (webhook.WatchHealth).
			NewInformer: watchHealth.NewInformer,
		},
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	// The uniqueness check reads owners by pod label from an index, which
	// must exist before the informers start.
	for _, k := range admit.OwnerKinds {
		if err := mgr.GetFieldIndexer().IndexField(ctx, ownerObject(k), webhook.PodLabelIndex, webhook.IndexPodLabels(k)); err != nil {
			return fmt.Errorf("indexing %s by pod label: %w", k.GVK.Kind, err)
		}
	}
	// Registering the informers now makes the readiness check wait for their
	// first sync, and fails fast with a clear error when a CRD is missing.
	for _, obj := range []client.Object{claim, sandbox, &fencev1alpha1.FenceConfig{}, webhook.NamespaceMeta()} {
		if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
			gvk, _ := mgr.GetClient().GroupVersionKindFor(obj)
			return fmt.Errorf("watching %s (is its CRD installed?): %w", gvk, err)
		}
	}

	// The controller that renders the FenceConfig into the policies and
	// the webhook configuration runs on one replica at a time, elected by
	// its own Lease (rendercontroller.Leader: a lost Lease ends a term, not
	// the process); the webhook server and the certificate rotation run on
	// every one.
	lock, err := leaderelection.NewResourceLock(restConfig, mgr, leaderelection.Options{
		LeaderElection: o.leaderElect, LeaderElectionID: "sandbox-fence-render", LeaderElectionNamespace: o.namespace,
		RenewDeadline: 10 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("setting up leader election: %w", err)
	}
	if err := (&rendercontroller.Reconciler{Client: mgr.GetClient(), ConfigName: o.configName, WebhookConfigName: o.webhookConfigName}).SetupWithManager(mgr, lock); err != nil {
		return fmt.Errorf("setting up the FenceConfig controller: %w", err)
	}

	m := webhook.NewMetrics(metrics.Registry)
	m.SetMode(mode)
	metricsSrv, err := metricsServer(o, restConfig, mgr.GetHTTPClient())
	if err != nil {
		return err
	}
	live, dropLive, err := webhook.NewLiveReader(restConfig, scheme, mgr.GetRESTMapper())
	if err != nil {
		return err
	}
	cfg := webhook.ConfigSource{Reader: mgr.GetCache(), Live: live, Name: o.configName}
	srv := ctrlwebhook.NewServer(ctrlwebhook.Options{
		Host:    o.bindAddress,
		Port:    o.port,
		CertDir: o.certDir,
		TLSOpts: o.tlsOpts(),
	})
	// Every handler's refusals go through the enforcement mode (deny, warn
	// or audit): Events, the audit annotation, and in warn/audit an admission.
	// Wrapped so that responses close their connection while the webhook
	// drains before a shutdown (drain.go).
	enforce := func(h admission.Handler, apiVersion, kind string) http.Handler {
		return closeWhenDraining(&admission.Webhook{Handler: &webhook.Enforce{Handler: h, Mode: mode, Recorder: recorder, APIVersion: apiVersion, Kind: kind}}, draining)
	}
	srv.Register(webhook.CiliumEgressPath, enforce(&webhook.CiliumHandler{
		Config: cfg,
		Owners: &webhook.CachedOwners{Cache: mgr.GetCache(), Live: live, DropConnections: dropLive, Metrics: m,
			CacheFirst: o.ownerCacheFirst, CacheWait: o.ownerCacheWait, Fresh: watchHealth.Fresh},
		Namespaces:    &webhook.CachedNamespaces{Cache: mgr.GetCache(), Live: live},
		LookupTimeout: o.lookupTimeout,
		Metrics:       m,
	}, fence.CiliumNetworkPolicyGVK.GroupVersion().String(), fence.CiliumNetworkPolicyGVK.Kind))

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
		if metricsSrv != nil {
			if err := mgr.Add(metricsSrv); err != nil {
				return err
			}
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
		if err := mgr.Add(&certFiles{cache: mgr.GetCache(), secret: o.certSecretName, dir: o.certDir, log: log.WithName("cert-files")}); err != nil {
			return err
		}
		// The listener starts only once the rotated certificate is in
		// --cert-dir (certFiles) and the caBundle injected; until then
		// readyz fails and no traffic arrives.
		go func() {
			select {
			case <-ready:
				log.Info("serving certificate ready; starting the webhook listener")
				if err := mgr.Add(srv); err != nil {
					log.Error(err, "starting the webhook listener")
				}
				// The metrics listener serves the same certificate; started
				// before it is mounted it would fall back to a self-signed one.
				if metricsSrv != nil {
					if err := mgr.Add(metricsSrv); err != nil {
						log.Error(err, "starting the metrics listener")
					}
				}
			case <-ctx.Done():
			}
		}()
	}

	log.Info("starting", "config", o.configName, "port", o.port, "bindAddress", o.bindAddress,
		"certDir", o.certDir, "certRotation", o.certRotation, "tlsMinVersion", o.tlsMinVersion, "lookupTimeout", o.lookupTimeout.String(),
		"enforcement", mode, "metricsBindAddress", o.metricsAddr, "metricsSecure", o.metricsSecure)
	return mgr.Start(ctx)
}

// podReference is this pod, for Events about the webhook itself, from the
// downward API's POD_NAME; nil when not run as a pod.
func podReference(namespace string) *corev1.ObjectReference {
	name := os.Getenv("POD_NAME")
	if name == "" {
		return nil
	}
	return &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: namespace, Name: name}
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

// metricsServer serves /metrics on --metrics-bind-address: by default HTTPS
// with the webhook's own serving certificate (so a scraper can verify it
// with the CA of the certificate Secret), HTTP/2 off, and every request
// authenticated (TokenReview) and authorized (SubjectAccessReview for GET
// /metrics) against the API server. nil when metrics are off.
func metricsServer(o *options, cfg *rest.Config, hc *http.Client) (metricsserver.Server, error) {
	if o.metricsAddr == "0" {
		return nil, nil
	}
	opts := metricsserver.Options{BindAddress: o.metricsAddr}
	if o.metricsSecure {
		opts.SecureServing = true
		opts.CertDir = o.certDir
		opts.TLSOpts = o.tlsOpts()
		opts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return metricsserver.NewServer(opts, cfg, hc)
}

// eventRecorder records the webhook's refusals as Events in the request's
// namespace (kubectl get events). The correlator keeps them from flooding
// the API server: per namespace and reason a burst of 25, then one every
// 10 seconds, and similar Events aggregated into one with a count.
func eventRecorder(cfg *rest.Config, scheme *runtime.Scheme) (record.EventRecorder, func(), error) {
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	b := newEventBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kc.CoreV1().Events("")})
	return b.NewRecorder(scheme, corev1.EventSource{Component: "sandbox-fence-webhook"}), b.Shutdown, nil
}

// eventBurst and eventQPS bound the Events of one namespace and reason.
const (
	eventBurst = 25
	eventQPS   = 0.1
)

// newEventBroadcaster is client-go's broadcaster with a spam filter keyed by
// namespace and reason (not by object: every refused policy has a name of
// its own, so a per-object key would bound nothing).
func newEventBroadcaster() record.EventBroadcaster {
	return record.NewBroadcasterWithCorrelatorOptions(record.CorrelatorOptions{
		BurstSize: eventBurst,
		QPS:       eventQPS,
		SpamKeyFunc: func(e *corev1.Event) string {
			return e.Source.Component + "/" + e.InvolvedObject.Namespace + "/" + e.Reason
		},
	})
}
