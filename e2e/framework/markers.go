package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// Marker is a write that enforcement must deny: policies, bindings, params
// and webhook configurations reach the apiserver's admission caches
// asynchronously, so the suite polls a marker until it is denied instead of
// sleeping. Markers are dry-run creates: they leave nothing behind.
type Marker struct {
	// Name says what the marker proves is live.
	Name string
	// As is the identity sending the write.
	As *Identity
	// Obj is created with dryRun=All.
	Obj *unstructured.Unstructured
	// Want must occur in the denial message.
	Want string
}

// WaitDenied polls m until it is denied with m.Want.
func (e *Env) WaitDenied(ctx context.Context, m Marker, timeout time.Duration) error {
	return e.waitMarker(ctx, m, true, timeout)
}

// WaitAdmitted polls m until it is admitted (enforcement switched off).
func (e *Env) WaitAdmitted(ctx context.Context, m Marker, timeout time.Duration) error {
	return e.waitMarker(ctx, m, false, timeout)
}

func (e *Env) waitMarker(ctx context.Context, m Marker, denied bool, timeout time.Duration) error {
	mapper, err := e.Mapper()
	if err != nil {
		return err
	}
	what := "enforcement marker " + m.Name + " denied"
	if !denied {
		what = "enforcement marker " + m.Name + " admitted"
	}
	return Eventually(ctx, timeout, 250*time.Millisecond, what, func(ctx context.Context) (bool, string, error) {
		ri, err := ResourceFor(mapper, m.As.Dynamic, m.Obj)
		if err != nil {
			return false, "", err
		}
		_, err = ri.Create(ctx, m.Obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: FieldManager})
		switch {
		case err == nil:
			return !denied, "admitted", nil
		case strings.Contains(err.Error(), m.Want):
			return denied, err.Error(), nil
		case apierrors.IsForbidden(err) && !strings.Contains(err.Error(), "admission"):
			return false, "", fmt.Errorf("marker %s refused by RBAC, not admission: %w", m.Name, err)
		default:
			return false, err.Error(), nil
		}
	})
}

// HolderEpochMarker is a create with a malformed epoch: denied exactly
// while the holder-epoch policy is bound.
func (e *Env) HolderEpochMarker() Marker {
	return Marker{
		Name: PolicyHolderEpoch,
		As:   e.Admin,
		Obj:  MakeSandbox(e.HostNamespace, "marker-epoch").Annotation(fence.AnnotationHolderEpoch, "01").Obj(),
		Want: PolicyHolderEpoch,
	}
}

// CiliumOwnerMarker is the host's create of a claim carrying the orphan
// finalizer: denied exactly while the cilium-owner policy is bound.
func (e *Env) CiliumOwnerMarker() Marker {
	return Marker{
		Name: PolicyCiliumOwner,
		As:   e.Host,
		Obj:  MakeClaim(e.HostNamespace, "marker-orphan").Finalizer("orphan").Obj(),
		Want: PolicyCiliumOwner,
	}
}

// WithoutHolderEpochBinding runs fn while the holder-epoch policy's binding
// is removed, then restores it and waits until enforcement is back. It is the
// only way to seed what the fence forbids (a malformed stored epoch, the
// state "from before the fence was installed"), so break-glass repair can be
// tested. Tests using it must not run in parallel with others.
func (e *Env) WithoutHolderEpochBinding(ctx context.Context, fn func() error) (err error) {
	if e.Peer != nil {
		return e.Peer.WithoutHolderEpoch(ctx, e, fn)
	}
	bindings := e.Admin.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	name := PolicyHolderEpoch + "-binding"
	saved, err := bindings.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("binding %s: %w", name, err)
	}
	if err := bindings.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	defer func() {
		restore := saved.DeepCopy()
		restore.ObjectMeta = metav1.ObjectMeta{Name: saved.Name, Labels: saved.Labels, Annotations: saved.Annotations}
		if _, cerr := bindings.Create(context.WithoutCancel(ctx), restore, metav1.CreateOptions{}); cerr != nil && !apierrors.IsAlreadyExists(cerr) {
			err = errors.Join(err, fmt.Errorf("restore binding %s: %w", name, cerr))
			return
		}
		err = errors.Join(err, e.WaitDenied(context.WithoutCancel(ctx), e.HolderEpochMarker(), 90*time.Second))
	}()
	if err := e.WaitAdmitted(ctx, e.HolderEpochMarker(), 90*time.Second); err != nil {
		return err
	}
	return fn()
}

// Markers returns a marker per installed enforcer: the holder-epoch policy
// (a malformed epoch on create), the egress policy (an unprefixed policy
// name by the bound host; it also proves the FenceConfig is rendered into
// it, since only a bound host gets that message) and the webhook (a
// well-formed policy whose owner does not exist, which only the webhook can
// refuse, once the bound hosts are rendered into its match conditions).
func (e *Env) Markers(ctx context.Context) ([]Marker, error) {
	var ms []Marker
	// What is installed is recorded only once every lookup has answered: a
	// lookup that failed (a context that ran out, an API server restarting)
	// says nothing of the bundle, and must not make later cases skip as if
	// a policy were absent.
	installed := map[string]bool{}
	exists := func(name string) (bool, error) {
		_, err := e.Admin.Dynamic.Resource(VAPGVR).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			installed[name] = false
			return false, nil
		}
		installed[name] = err == nil
		return err == nil, err
	}
	if ok, err := exists(PolicyHolderEpochRepair); err != nil {
		return nil, err
	} else if !ok {
		logMissing(PolicyHolderEpochRepair)
	}
	if ok, err := exists(PolicyHolderEpoch); err != nil {
		return nil, err
	} else if ok {
		ms = append(ms, e.HolderEpochMarker())
	}
	if ok, err := exists(PolicyCiliumEgress); err != nil {
		return nil, err
	} else if ok {
		cnp, err := e.PerSandboxPolicy("SandboxClaim", "marker", string(uuid.NewUUID()), []string{"example.com"})
		if err != nil {
			return nil, err
		}
		cnp.SetName("marker-without-prefix")
		// The name rule's own message: the policy refuses every
		// ServiceAccount in opted-in namespaces until the controller has
		// rendered the FenceConfig into it, so only this
		// message says the configuration is in force.
		ms = append(ms, Marker{Name: PolicyCiliumEgress, As: e.Host, Obj: cnp, Want: "does not start with namzu-sbx-"})
	}
	if ok, err := exists(PolicyCiliumOwner); err != nil {
		return nil, err
	} else if ok {
		ms = append(ms, e.CiliumOwnerMarker())
	}
	if ok, err := exists(PolicyStrictDelete); err != nil {
		return nil, err
	} else if !ok {
		logMissing(PolicyStrictDelete)
	}
	e.Policies = installed
	for _, p := range []string{PolicyHolderEpoch, PolicyCiliumEgress, PolicyCiliumOwner} {
		if !e.Policies[p] {
			logMissing(p)
		}
	}
	if e.WebhookInstalled {
		cnp, err := e.PerSandboxPolicy("SandboxClaim", "marker-missing-owner", string(uuid.NewUUID()), []string{"example.com"})
		if err != nil {
			return nil, err
		}
		ms = append(ms, Marker{Name: "webhook", As: e.Host, Obj: cnp, Want: "admission webhook"})
	}
	return ms, nil
}

func logMissing(policy string) {
	fmt.Fprintf(os.Stderr, "!!! ValidatingAdmissionPolicy %s is NOT INSTALLED: its cases will skip\n", policy)
}

// AllowPartialEnv names the variable that lets the suite run on a cluster
// where only part of the bundle is installed (say, the VAPs without the
// webhook), skipping the cases of what is absent. Without it a missing part
// fails the suite: a skipped check must never read as a pass.
const AllowPartialEnv = "E2E_ALLOW_PARTIAL"

// RequireComplete fails when a shipped enforcer is absent, unless
// E2E_ALLOW_PARTIAL=1 says the cluster deliberately runs a partial bundle.
func (e *Env) RequireComplete() error {
	var missing []string
	for _, p := range []string{PolicyHolderEpoch, PolicyHolderEpochRepair, PolicyCiliumEgress, PolicyCiliumOwner, PolicyStrictDelete} {
		if !e.Policies[p] {
			missing = append(missing, "ValidatingAdmissionPolicy "+p)
		}
	}
	if !e.WebhookInstalled {
		missing = append(missing, "the webhook ("+WebhookConfigName+")")
	}
	if len(missing) == 0 {
		return nil
	}
	if os.Getenv(AllowPartialEnv) == "1" {
		fmt.Fprintf(os.Stderr, "!!! %s=1: running without %s; their cases skip\n", AllowPartialEnv, strings.Join(missing, ", "))
		return nil
	}
	return fmt.Errorf("the bundle is incomplete: %s not installed; install config/default, or set %s=1 to run only the cases of what is installed", strings.Join(missing, ", "), AllowPartialEnv)
}

// WaitForEnforcement waits until every installed enforcer denies its marker.
func (e *Env) WaitForEnforcement(ctx context.Context, logf Logf) error {
	ms, err := e.Markers(ctx)
	if err != nil {
		return err
	}
	if err := e.RequireComplete(); err != nil {
		return err
	}
	for _, m := range ms {
		start := time.Now()
		if err := e.WaitDenied(ctx, m, 90*time.Second); err != nil {
			return err
		}
		logf("enforcement live: %s (%s)", m.Name, time.Since(start).Round(10*time.Millisecond))
	}
	return nil
}

// PerSandboxPolicy builds the host's exact per-sandbox policy with pkg/fence for
// an owner in the host namespace.
func (e *Env) PerSandboxPolicy(ownerKind, ownerName, ownerUID string, hosts []string) (*unstructured.Unstructured, error) {
	return fence.BuildPerSandboxPolicy(fence.PolicyInput{
		Owner:     fence.PolicyOwner{Kind: ownerKind, Name: ownerName, UID: ownerUID},
		Namespace: e.HostNamespace,
		Hosts:     hosts,
	})
}
