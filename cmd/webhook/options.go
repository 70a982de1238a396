package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/internal/enforcement"
	"github.com/sandbox-fence/sandbox-fence/internal/webhook"
)

// options are the command-line flags (documented in docs/webhook.md; the e2e
// harness runs the binary with exactly these names).
type options struct {
	certDir           string
	port              int
	bindAddress       string
	metricsAddr       string
	pprofAddr         string
	probeAddr         string
	configName        string
	tlsMinVersion     string
	certRotation      bool
	certSecretName    string
	serviceName       string
	namespace         string
	webhookConfigName string
	lookupTimeout     time.Duration
	logLevel          string
	gracefulShutdown  time.Duration
	shutdownDrain     time.Duration
	enforcement       string
	metricsSecure     bool
	leaderElect       bool
	ownerCacheFirst   bool
	ownerCacheWait    time.Duration
}

// podNamespace is the namespace the pod runs in ($POD_NAMESPACE, from the
// downward API), else the one config/ installs into.
func podNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return fencev1alpha1.DefaultNamespace
}

func bindFlags(fs *flag.FlagSet) *options {
	o := &options{}
	inCluster := os.Getenv("KUBERNETES_SERVICE_HOST") != ""
	ns := podNamespace()
	fs.StringVar(&o.certDir, "cert-dir", "/tmp/k8s-webhook-server/serving-certs", "Directory holding tls.crt and tls.key; reloaded when they change.")
	fs.IntVar(&o.port, "port", 9443, "Port of the webhook's TLS listener.")
	fs.StringVar(&o.bindAddress, "bind-address", "", "Address of the webhook's TLS listener; empty means all addresses.")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", `Address of the Prometheus metrics endpoint; "0" turns it off.`)
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "", `Address of Go's /debug/pprof endpoints, plain HTTP without authentication: bind it to localhost, and only to profile; "" (the default) turns them off.`)
	fs.BoolVar(&o.metricsSecure, "metrics-secure", true, "Serve metrics over HTTPS with the serving certificate of --cert-dir, and only to callers the API server authenticates and authorizes for GET /metrics; false serves plain HTTP to anyone who reaches the port.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address of /healthz and /readyz.")
	fs.StringVar(&o.configName, "config-name", fencev1alpha1.DefaultConfigName, "Name of the cluster-scoped FenceConfig to read.")
	fs.StringVar(&o.tlsMinVersion, "tls-min-version", "1.2", "Minimum TLS version of the webhook listener: 1.2 or 1.3.")
	fs.BoolVar(&o.certRotation, "cert-rotation", inCluster, "Generate and rotate the serving certificate (Secret --cert-secret-name, mounted at --cert-dir) and inject its CA into --webhook-config-name; false uses the files in --cert-dir as given. Defaults to true in a cluster.")
	fs.StringVar(&o.certSecretName, "cert-secret-name", "sandbox-fence-webhook-cert", "Secret holding the rotated serving certificate.")
	fs.StringVar(&o.serviceName, "service-name", "sandbox-fence-webhook", "Service in front of the webhook; the certificate is issued for its DNS names.")
	fs.StringVar(&o.namespace, "namespace", ns, "Namespace of the Secret and Service (defaults to $POD_NAMESPACE, else sandbox-fence-system).")
	fs.StringVar(&o.webhookConfigName, "webhook-config-name", "sandbox-fence-webhook", "ValidatingWebhookConfiguration whose caBundle the rotation keeps current, and whose bound-hosts match condition the controller renders from the FenceConfig.")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "Run the controller that renders the FenceConfig into the policies and the webhook configuration on the elected leader only (Lease sandbox-fence-render in --namespace); the webhook serves on every replica either way.")
	fs.DurationVar(&o.lookupTimeout, "lookup-timeout", webhook.DefaultLookupTimeout, "Upper bound on the reads of one admission request (FenceConfig, owner); keep it below the webhook's timeoutSeconds.")
	fs.BoolVar(&o.ownerCacheFirst, "owner-cache-first", true, "Admit on the informer's copy of an owner when it has the policy's uid and pod label and no deletionTimestamp and the informer's watch is current; false reads every admitted owner live (docs/webhook.md, Caching, says what this trades).")
	fs.DurationVar(&o.ownerCacheWait, "owner-cache-wait", webhook.DefaultCacheWait, "With --owner-cache-first, how long a cache miss waits for the informer before the live read.")
	fs.StringVar(&o.logLevel, "log-level", "info", "Log level: debug, info or error.")
	fs.DurationVar(&o.gracefulShutdown, "graceful-shutdown-timeout", 30*time.Second, "How long to let in-flight requests finish on SIGTERM.")
	fs.DurationVar(&o.shutdownDrain, "shutdown-drain", 5*time.Second, "After SIGTERM, how long to keep serving with every response closing its connection, before shutting down (drain.go says why).")
	fs.StringVar(&o.enforcement, "enforcement", string(enforcement.Deny), "What a violation does: deny (HTTP 422), warn (admit with the denial message as an admission warning and an audit annotation) or audit (admit with the audit annotation only). Set by the component config/components/enforcement/<mode> together with the policies' bindings (contract §9.1).")
	return o
}

func (o *options) validate() error {
	if _, err := enforcement.Parse(o.enforcement); err != nil {
		return fmt.Errorf("--%w", err)
	}
	if _, err := o.tlsVersion(); err != nil {
		return err
	}
	if _, err := o.slogLevel(); err != nil {
		return err
	}
	if o.port < 1 || o.port > 65535 {
		return fmt.Errorf("--port %d: must be 1-65535", o.port)
	}
	if o.lookupTimeout <= 0 {
		return fmt.Errorf("--lookup-timeout %v: must be positive", o.lookupTimeout)
	}
	if o.ownerCacheWait < 0 || o.ownerCacheWait >= o.lookupTimeout {
		return fmt.Errorf("--owner-cache-wait %v: must be at least 0 and below --lookup-timeout (%v), which the live read after it needs", o.ownerCacheWait, o.lookupTimeout)
	}
	if o.configName == "" {
		return fmt.Errorf("--config-name: must not be empty")
	}
	if o.webhookConfigName == "" {
		return fmt.Errorf("--webhook-config-name: must not be empty: the controller renders the bound hosts into it")
	}
	if o.leaderElect && o.namespace == "" {
		return fmt.Errorf("--leader-elect needs --namespace, where the Lease lives")
	}
	if o.certRotation && (o.namespace == "" || o.certSecretName == "" || o.serviceName == "") {
		return fmt.Errorf("--cert-rotation needs --namespace, --cert-secret-name and --service-name")
	}
	return nil
}

func (o *options) tlsVersion() (uint16, error) {
	switch o.tlsMinVersion {
	case "1.2":
		return tls.VersionTLS12, nil
	case "1.3":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("--tls-min-version %q: must be 1.2 or 1.3", o.tlsMinVersion)
}

func (o *options) slogLevel() (slog.Level, error) {
	switch o.logLevel {
	case "debug":
		// controller-runtime logs request details at V(5); logr's V(n) maps
		// to slog level -n.
		return slog.Level(-5), nil
	case "info":
		return slog.LevelInfo, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("--log-level %q: must be debug, info or error", o.logLevel)
}

// tlsOpts configures the webhook listener: the minimum version, and HTTP/2
// off, because HTTP/2 stream handling has been a repeated denial-of-service
// vector (CVE-2023-44487, CVE-2023-39325) and the API server needs only
// HTTP/1.1 to call a webhook.
func (o *options) tlsOpts() []func(*tls.Config) {
	v, _ := o.tlsVersion()
	return []func(*tls.Config){func(c *tls.Config) {
		c.MinVersion = v
		c.NextProtos = []string{"http/1.1"}
	}}
}
