package framework

import (
	"context"
	"sync/atomic"
	"testing"
)

// EnvEnforcer names the variable that points the suite at another enforcer:
// unset (or sandbox-fence) runs the shipped bundle; kyverno or gatekeeper
// removes the shipped bindings and webhook configuration and installs that
// engine with the same fence written in its own language
// (e2e/bench/peers). The same cases then run unchanged, so the comparison in
// BENCHMARKS.md is one suite, three enforcers.
const EnvEnforcer = "E2E_ENFORCER"

// ShippedEnforcer is the name of the shipped bundle as an enforcer.
const ShippedEnforcer = "sandbox-fence"

// Peer is a policy engine enforcing the fence instead of the shipped
// bindings and webhook (e2e/peers implements it).
type Peer interface {
	// Name is the engine (kyverno, gatekeeper).
	Name() string
	// Source is the name its denials carry: the webhook the API server
	// names in "admission webhook %q denied the request".
	Source() string
	// WithoutHolderEpoch runs fn while the engine's holder-epoch rule is
	// off, then restores it and waits until it denies again: the peer's
	// counterpart of Env.WithoutHolderEpochBinding.
	WithoutHolderEpoch(ctx context.Context, env *Env, fn func() error) error
}

// activePeer is the peer of the running suite, read by ExpectDenied: the
// cases name the shipped enforcer that refuses a write, and under a peer the
// one enforcer of that engine refuses them all.
var activePeer atomic.Pointer[Peer]

// UsePeer records that p enforces the fence on this cluster: every case runs
// against it, and every shipped enforcer counts as present.
func (e *Env) UsePeer(p Peer) {
	e.Peer = p
	e.Policies = map[string]bool{PolicyHolderEpoch: true, PolicyHolderEpochRepair: true, PolicyCiliumEgress: true, PolicyCiliumOwner: true, PolicyStrictDelete: true}
	e.WebhookInstalled = true
	// The outage case stops sandbox-fence's own webhook process.
	e.WebhookProcess = nil
	activePeer.Store(&p)
}

func currentPeer() Peer {
	if p := activePeer.Load(); p != nil {
		return *p
	}
	return nil
}

// peerDenial checks a denial under a peer: the peer's own webhook refused
// the write with every wanted phrase. The HTTP code is reported, not
// required: neither peer can answer 422 (BENCHMARKS.md), and the correctness
// table shows that as its own column.
func peerDenial(t testing.TB, p Peer, what string, v Verdict, want []string) {
	t.Helper()
	if err := v.deniedBy(p.Source(), want, false); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	t.Logf("peer-wire: %s answered HTTP %d (sandbox-fence denies with 422)", p.Name(), v.Code)
}

// RequirePorted skips, under a peer, the check of a rule the peers' fences
// leave out on purpose (e2e/bench/peers/README.md): n/a there, not wrong.
func RequirePorted(t testing.TB, env *Env, rule string) {
	t.Helper()
	if env.Peer != nil {
		t.Skipf("n/a: %s is left out of the peers' fences (e2e/bench/peers/README.md); %s=%s", rule, EnvEnforcer, env.Peer.Name())
	}
}

// RequireShipped skips a case that checks the shipped bundle itself (its
// manifests, its type checks, its optional webhook components, the host
// library's check for its policies) rather than a rule every enforcer must
// keep.
func RequireShipped(t testing.TB, env *Env) {
	t.Helper()
	if env.Peer != nil {
		t.Skipf("n/a: checks the shipped sandbox-fence bundle itself, not a fence rule; %s=%s", EnvEnforcer, env.Peer.Name())
	}
}
