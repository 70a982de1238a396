package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/e2e/peers"
	"github.com/sandbox-fence/sandbox-fence/e2e/provider"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// config is one installation state of the fence. All of them live in one
// control plane: the policies stay, and only their bindings and the webhook
// configuration are created or deleted, which is what turns enforcement on
// and off in the apiserver (a policy without a binding is never evaluated).
// A peer configuration (-peers) removes both and enables that engine's own
// fence instead (e2e/peers): the engine processes run throughout the run,
// idle while another configuration is measured.
type config struct {
	Name    string
	VAPs    bool
	Webhook bool
	// Peer is the engine enforcing the fence instead ("" for none).
	Peer string
	// LiveRead runs the webhook with --owner-cache-first=false.
	LiveRead bool
}

var shippedConfigs = []config{
	{Name: "none", VAPs: false, Webhook: false},
	{Name: "vaps", VAPs: true, Webhook: false},
	{Name: "vaps+webhook", VAPs: true, Webhook: true},
}

// ours is the configuration that is sandbox-fence as shipped.
const ours = "vaps+webhook"

// The optional configurations, each measured against a partner of the same
// run (pairs): the shipped webhook against one with --owner-cache-first=false, and a second no-fence configuration against none, an A/A control
// whose interval must include 0.
var (
	liveConfig = config{Name: "vaps+webhook-live", VAPs: true, Webhook: true, LiveRead: true}
	aaConfig   = config{Name: "none-aa"}
)

// configsFor returns the configurations of a run: the shipped ones, the
// optional ones, the peers last.
func configsFor(withPeers, liveRead, aa bool) []config {
	cs := slices.Clone(shippedConfigs)
	if liveRead {
		cs = append(cs, liveConfig)
	}
	if aa {
		cs = append(cs, aaConfig)
	}
	if withPeers {
		for _, p := range peers.Names {
			cs = append(cs, config{Name: p, Peer: p})
		}
	}
	return cs
}

// switcher installs a configuration and waits until the apiserver enforces
// exactly it, observed through one probe per enforcer.
type switcher struct {
	env      *framework.Env
	bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
	vwc      *admissionregistrationv1.ValidatingWebhookConfiguration
	engines  map[string]*peers.Engine
	enabled  map[string]bool
	probes   []probe
	logf     framework.Logf
	// restartWebhook restarts the webhook with one flag changed; liveRead
	// is the running webhook's --owner-cache-first=false.
	restartWebhook func(ctx context.Context, flag string) error
	liveRead       bool
}

// probe is a dry-run write that one enforcer denies. want returns the
// substring of the denial a configuration gives, or "" when it admits;
// unwanted, when set, a substring the denial must not carry (a binding
// this configuration removed, still enforced).
type probe struct {
	name     string
	want     func(config) string
	unwanted func(config) string
	try      func(ctx context.Context) error
}

// quoted is how the apiserver names a policy in its denial.
func quoted(policy string) string { return "'" + policy + "'" }

func newSwitcher(ctx context.Context, env *framework.Env, engines map[string]*peers.Engine, malformed string, logf framework.Logf) (*switcher, error) {
	s := &switcher{env: env, engines: engines, enabled: map[string]bool{}, logf: logf}
	ar := env.Admin.Kube.AdmissionregistrationV1()
	for _, n := range provider.ShippedEnforcement.Bindings {
		b, err := ar.ValidatingAdmissionPolicyBindings().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("binding %s (is the bundle installed?): %w", n, err)
		}
		b.ObjectMeta = metav1.ObjectMeta{Name: b.Name, Labels: b.Labels, Annotations: b.Annotations}
		s.bindings = append(s.bindings, b)
	}
	vwc, err := ar.ValidatingWebhookConfigurations().Get(ctx, framework.WebhookConfigName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("webhook configuration %s (did the local webhook start?): %w", framework.WebhookConfigName, err)
	}
	vwc.ObjectMeta = metav1.ObjectMeta{Name: vwc.Name, Labels: vwc.Labels, Annotations: vwc.Annotations}
	s.vwc = vwc

	markers, err := env.Markers(ctx)
	if err != nil {
		return nil, err
	}
	dryCreate := func(m framework.Marker) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			mapper, err := env.Mapper()
			if err != nil {
				return err
			}
			ri, err := framework.ResourceFor(mapper, m.As.Dynamic, m.Obj)
			if err != nil {
				return err
			}
			_, err = ri.Create(ctx, m.Obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: framework.FieldManager})
			return err
		}
	}
	// peerOr gives a peer configuration its engine's denial, else ours.
	peerOr := func(ours func(config) string) func(config) string {
		return func(c config) string {
			if c.Peer != "" {
				return engines[c.Peer].Source()
			}
			return ours(c)
		}
	}
	onlyIf := func(on bool, want string) string {
		if on {
			return want
		}
		return ""
	}
	for _, m := range markers {
		p := probe{name: m.Name, try: dryCreate(m)}
		switch m.Name {
		case framework.PolicyHolderEpoch:
			// The repair policy's name contains this one's: match the quoted name.
			p.want = peerOr(func(c config) string { return onlyIf(c.VAPs, quoted(framework.PolicyHolderEpoch)) })
		case framework.PolicyCiliumEgress:
			p.want = peerOr(func(c config) string { return onlyIf(c.VAPs, quoted(framework.PolicyCiliumEgress)) })
		case "webhook":
			// Only an owner lookup refuses it: our webhook or a peer's.
			p.want = peerOr(func(c config) string { return onlyIf(c.Webhook, ".fence.sandbox.namzu.ai") })
		default:
			continue
		}
		s.probes = append(s.probes, p)
	}
	if len(s.probes) != 3 {
		return nil, fmt.Errorf("want probes for %s, %s and the webhook, found %d markers", framework.PolicyHolderEpoch, framework.PolicyCiliumEgress, len(s.probes))
	}
	// The repair policy denies only a change of a
	// MALFORMED stored epoch, so its probe patches the seeded malformed
	// Sandbox as the host; the holder-epoch policy admits that write.
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"7"}}}`, fence.AnnotationHolderEpoch)
	s.probes = append(s.probes, probe{
		name: framework.PolicyHolderEpochRepair,
		want: peerOr(func(c config) string { return onlyIf(c.VAPs, quoted(framework.PolicyHolderEpochRepair)) }),
		try: func(ctx context.Context) error {
			_, err := env.Host.Dynamic.Resource(framework.SandboxGVR).Namespace(env.HostNamespace).Patch(ctx, malformed,
				types.MergePatchType, patch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: framework.FieldManager})
			return err
		},
	})
	return s, nil
}

// install creates or deletes the bindings, the webhook configuration and
// the peers' fences for c, then polls every probe until its verdict is the
// one c implies.
func (s *switcher) install(ctx context.Context, c config) (time.Duration, error) {
	start := time.Now()
	for name, e := range s.engines {
		if name != c.Peer && s.enabled[name] {
			if err := e.Disable(ctx, s.env); err != nil {
				return 0, fmt.Errorf("config %s: %w", c.Name, err)
			}
			s.enabled[name] = false
		}
	}
	ar := s.env.Admin.Kube.AdmissionregistrationV1()
	for _, b := range s.bindingsFor() {
		var err error
		if s.bound(c, b) {
			_, err = ar.ValidatingAdmissionPolicyBindings().Create(ctx, b.DeepCopy(), metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				err = nil
			}
		} else {
			err = ar.ValidatingAdmissionPolicyBindings().Delete(ctx, b.Name, metav1.DeleteOptions{})
			if apierrors.IsNotFound(err) {
				err = nil
			}
		}
		if err != nil {
			return 0, fmt.Errorf("config %s: binding %s: %w", c.Name, b.Name, err)
		}
	}
	if c.Webhook && c.LiveRead != s.liveRead {
		if err := s.restartWebhook(ctx, fmt.Sprintf("--owner-cache-first=%t", !c.LiveRead)); err != nil {
			return 0, fmt.Errorf("config %s: %w", c.Name, err)
		}
		s.liveRead = c.LiveRead
	}
	var err error
	if c.Webhook {
		_, err = ar.ValidatingWebhookConfigurations().Create(ctx, s.vwc.DeepCopy(), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
	} else {
		err = ar.ValidatingWebhookConfigurations().Delete(ctx, s.vwc.Name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			err = nil
		}
	}
	if err != nil {
		return 0, fmt.Errorf("config %s: webhook configuration: %w", c.Name, err)
	}
	if c.Peer != "" && !s.enabled[c.Peer] {
		if err := s.engines[c.Peer].Enable(ctx, s.env); err != nil {
			return 0, fmt.Errorf("config %s: %w", c.Name, err)
		}
		s.enabled[c.Peer] = true
	}
	for _, p := range s.probes {
		want := p.want(c)
		what := fmt.Sprintf("config %s: probe %s admitted", c.Name, p.name)
		if want != "" {
			what = fmt.Sprintf("config %s: probe %s denied by %s", c.Name, p.name, want)
		}
		err := framework.Eventually(ctx, 3*time.Minute, 50*time.Millisecond, what, func(ctx context.Context) (bool, string, error) {
			err := p.try(ctx)
			switch {
			case err == nil:
				return want == "", "admitted", nil
			case p.unwanted != nil && strings.Contains(err.Error(), p.unwanted(c)):
				// A binding this configuration removed still enforces.
				return false, err.Error(), nil
			case want != "" && strings.Contains(err.Error(), want):
				return true, err.Error(), nil
			case apierrors.IsForbidden(err) && !strings.Contains(err.Error(), "admission"):
				return false, "", fmt.Errorf("probe %s refused by RBAC, not admission: %w", p.name, err)
			default:
				// Another enforcer denied it: not yet in the wanted state.
				return false, err.Error(), nil
			}
		})
		if err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

// seedMalformed creates, while the holder-epoch binding is absent, the
// Sandbox whose malformed epoch the repair probe needs: the state "from
// before the fence was installed" that only break-glass may change.
func seedMalformed(ctx context.Context, env *framework.Env, name string) error {
	return env.WithoutHolderEpochBinding(ctx, func() error {
		obj := framework.MakeSandbox(env.HostNamespace, name).Annotation(fence.AnnotationHolderEpoch, "01").Obj()
		_, err := env.Admin.Dynamic.Resource(framework.SandboxGVR).Namespace(env.HostNamespace).Create(ctx, obj, metav1.CreateOptions{FieldManager: framework.FieldManager})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
}

// bindingsFor lists every binding a configuration may turn on.
func (s *switcher) bindingsFor() []*admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return s.bindings
}

// bound says whether configuration c wants binding b: every shipped
// binding with the VAPs.
func (s *switcher) bound(c config, _ *admissionregistrationv1.ValidatingAdmissionPolicyBinding) bool {
	return c.VAPs
}
