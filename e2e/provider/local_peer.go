package provider

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/e2e/peers"
)

// ShippedEnforcement lists what turns the shipped bundle's enforcement on:
// its policy bindings and its webhook configuration (a policy without a
// binding is never evaluated). The bench switches them; a peer run removes
// them.
var ShippedEnforcement = struct {
	Bindings []string
	Webhook  string
}{
	Bindings: []string{
		framework.PolicyHolderEpoch + "-binding",
		framework.PolicyHolderEpochRepair + "-binding",
		framework.PolicyCiliumEgress + "-binding",
		framework.PolicyCiliumOwner + "-binding",
	},
	Webhook: framework.WebhookConfigName,
}

// RemoveShippedEnforcement deletes the shipped bindings and webhook
// configuration and waits until the shipped markers are admitted.
func RemoveShippedEnforcement(ctx context.Context, env *framework.Env) error {
	ar := env.Admin.Kube.AdmissionregistrationV1()
	for _, b := range ShippedEnforcement.Bindings {
		if err := ar.ValidatingAdmissionPolicyBindings().Delete(ctx, b, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	if err := ar.ValidatingWebhookConfigurations().Delete(ctx, ShippedEnforcement.Webhook, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	ms, err := env.Markers(ctx)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if err := env.WaitAdmitted(ctx, m, 90*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// usePeer replaces the shipped enforcement by the peer engine l.Enforcer:
// the bundle's CRDs, RBAC, namespaces and FenceConfig stay (the identities
// and the configuration are the same for every enforcer), its bindings and
// webhook configuration go, and the engine runs with its fence.
func (l *Local) usePeer(ctx context.Context) error {
	if err := peers.Build(ctx, l.RepoRoot, l.Enforcer); err != nil {
		return err
	}
	e, err := peers.New(l.Enforcer, l.RepoRoot, l.BinDir, l.Logf)
	if err != nil {
		return err
	}
	if err := RemoveShippedEnforcement(ctx, l.Env); err != nil {
		return fmt.Errorf("remove the shipped enforcement: %w", err)
	}
	if err := e.Start(ctx, l.Env, l.CP); err != nil {
		return err
	}
	if err := e.Enable(ctx, l.Env); err != nil {
		return err
	}
	l.Env.UsePeer(e)
	l.Logf("local: %s enforces the fence (its own webhook and policies; the shipped bindings and webhook configuration removed)", e.Name())
	return nil
}
