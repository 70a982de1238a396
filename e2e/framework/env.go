package framework

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// Identity is one authenticated caller with ready clients.
type Identity struct {
	// Name is the kubeconfig context name (ContextHost, ...).
	Name string
	// Username and Groups are what the apiserver should see; the suite
	// checks them with a SelfSubjectReview so a wrong setup fails loudly.
	Username string
	Groups   []string

	Config  *rest.Config
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
}

// NewIdentity builds the clients for cfg.
func NewIdentity(name, username string, groups []string, cfg *rest.Config) (*Identity, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 100, 200
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("identity %s: %w", name, err)
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("identity %s: %w", name, err)
	}
	return &Identity{Name: name, Username: username, Groups: groups, Config: cfg, Kube: kc, Dynamic: dc}, nil
}

// Env is what a suite runs against: the identities of a production install
// and the cluster's REST mapping.
type Env struct {
	// Provider names where the cluster comes from (local, kubeconfig, kind).
	Provider string

	Admin      *Identity
	Host       *Identity
	OtherHost  *Identity
	Operator   *Identity
	BreakGlass *Identity

	HostNamespace      string
	OtherHostNamespace string

	// WebhookInstalled is false when the provider found no webhook to run;
	// webhook-only cases skip with that reason.
	WebhookInstalled bool
	// Peer is the policy engine enforcing the fence instead of the shipped
	// bindings and webhook ($E2E_ENFORCER, peer.go); nil for the bundle.
	Peer Peer
	// WebhookProcess stops and restarts the webhook: the local process, or
	// the in-cluster Deployment scaled to zero and back; nil when the
	// provider cannot (webhookproc.go).
	WebhookProcess WebhookProcess
	// APIServerProcess restarts kube-apiserver: the local process, or kind's
	// static pod; nil when the provider cannot (apiserverproc.go).
	APIServerProcess APIServerProcess
	// InCluster is true when the webhook runs as the shipped Deployment
	// behind its Service (kind): the rollout, eviction, rotation, drain and
	// placement cases need it.
	InCluster bool
	// Nodes stops and starts nodes when the provider owns them (kind); nil
	// otherwise (nodes.go).
	Nodes Nodes
	// Policies holds the shipped ValidatingAdmissionPolicies found on the
	// cluster (filled by WaitForEnforcement); cases of a missing one skip.
	Policies map[string]bool
	// WebhookMetrics reaches every webhook replica's metrics endpoint: the
	// local process's address, or a port-forward to each pod (kind); nil
	// when the provider cannot (metrics.go).
	WebhookMetrics WebhookMetrics
	// SetEnforcement switches the installed bundle to an enforcement mode
	// through its kustomize component (config/components/enforcement) and
	// returns once the webhook runs with the component's flag; nil when the
	// provider cannot (then the mode cases skip with that reason).
	SetEnforcement func(ctx context.Context, mode string) error
	// InstallBundle installs the bundle again as the provider did at setup,
	// hosts bound, after a case removed it (the lifecycle case); nil when
	// the provider cannot (kind can).
	InstallBundle func(ctx context.Context) error
	// MirrorRegistry makes every node pull images named host/... from a
	// plain-HTTP registry the suite serves on port of the machine it runs
	// on; nil when the provider cannot (kind can: a node reaches its host
	// at its default gateway).
	MirrorRegistry func(ctx context.Context, host string, port int) error
	// ConversionServed is true when v1alpha1 Sandbox requests work (a CRD
	// with strategy None, or a conversion webhook present).
	ConversionServed bool

	mapper *restmapper.DeferredDiscoveryRESTMapper
}

// Identities returns the identities keyed by context name.
func (e *Env) Identities() map[string]*Identity {
	m := map[string]*Identity{}
	for _, id := range []*Identity{e.Admin, e.Host, e.OtherHost, e.Operator, e.BreakGlass} {
		if id != nil {
			m[id.Name] = id
		}
	}
	return m
}

// Configs returns the rest.Config of every identity keyed by context name,
// the input of cluster.WriteKubeconfig.
func (e *Env) Configs() map[string]*rest.Config {
	m := map[string]*rest.Config{}
	for n, id := range e.Identities() {
		m[n] = id.Config
	}
	return m
}

// Mapper is a discovery-backed REST mapper for the admin; Reset it after
// installing CRDs.
func (e *Env) Mapper() (meta.ResettableRESTMapper, error) {
	if e.mapper == nil {
		dc, err := discovery.NewDiscoveryClientForConfig(e.Admin.Config)
		if err != nil {
			return nil, err
		}
		e.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	}
	return e.mapper, nil
}
