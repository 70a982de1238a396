package framework

import (
	"context"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

type fakePeer struct{}

func (fakePeer) Name() string   { return "gatekeeper" }
func (fakePeer) Source() string { return "validation.gatekeeper.sh" }
func (fakePeer) WithoutHolderEpoch(context.Context, *Env, func() error) error {
	return nil
}

// withPeer runs fn with p active, as UsePeer leaves it for a suite.
func withPeer(t *testing.T, p Peer, fn func(env *Env)) {
	t.Helper()
	saved := activePeer.Load()
	t.Cleanup(func() { activePeer.Store(saved) })
	env := &Env{}
	env.UsePeer(p)
	fn(env)
}

// Under a peer, a case's "denied by <shipped enforcer>" means denied by the
// peer's webhook with the same phrases, whatever its HTTP code; a refusal by
// the shipped policy or by RBAC is still not that.
func TestDeniedByFollowsThePeerEngine(t *testing.T) {
	peerDenial := &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
		Message: `admission webhook "validation.gatekeeper.sh" denied the request: [sandbox-fence-holder-epoch] holder-epoch: metadata.annotations[sandbox.namzu.ai/holder-epoch]: epoch may not decrease`,
	}}
	shipped := apierrors.NewInvalid(schema.GroupKind{Group: "agents.x-k8s.io", Kind: "Sandbox"}, "a", field.ErrorList{field.Invalid(field.NewPath(""), "", "ValidatingAdmissionPolicy 'sandbox-fence-holder-epoch' with binding 'sandbox-fence-holder-epoch-binding' denied request: holder-epoch: lowered")})
	rbac := apierrors.NewForbidden(schema.GroupResource{Resource: "sandboxes"}, "a", nil)
	tests := []struct {
		name string
		err  error
		want []string
		ok   bool
	}{
		{name: "the peer's 403 denial with the wanted phrase counts", err: peerDenial, want: []string{"holder-epoch:"}, ok: true},
		{name: "the peer's denial without a wanted phrase does not", err: peerDenial, want: []string{"cilium-fence:"}},
		{name: "the shipped policy's denial does not", err: shipped, want: []string{"holder-epoch:"}},
		{name: "an RBAC refusal does not", err: rbac},
		{name: "an admitted write does not", err: nil},
	}
	withPeer(t, fakePeer{}, func(env *Env) {
		if d := cmp.Diff(map[string]bool{PolicyHolderEpoch: true, PolicyHolderEpochRepair: true, PolicyCiliumEgress: true, PolicyCiliumOwner: true, PolicyStrictDelete: true}, env.Policies); d != "" || !env.WebhookInstalled || env.Peer == nil {
			t.Errorf("UsePeer: policies (-want +got) %s, webhook installed %v, peer %v", d, env.WebhookInstalled, env.Peer)
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				err := VerdictOf(tc.err).DeniedBy(PolicyHolderEpoch, tc.want...)
				if (err == nil) != tc.ok {
					t.Errorf("DeniedBy(%s) = %v, want ok=%v", PolicyHolderEpoch, err, tc.ok)
				}
			})
		}
	})
}
