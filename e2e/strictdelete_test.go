//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	fencev1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// strictDeleteWebhook is the entry the strict-delete component adds.
const strictDeleteWebhook = "sandbox-delete.fence.sandbox.namzu.ai"

// Strict delete (contract §8.4) switched on as an admin does it — the
// strict-delete component's webhook entry and FenceConfig
// spec.strictDelete — then off again: once a holder fenced a workspace, a
// bound host may delete it only with the fenced DELETE of contract §3.4, so a
// stale holder's unconditional DELETE cannot destroy it under the new
// holder's feet.
func TestStrictDeleteRequiresPreconditionsOnceFenced(t *testing.T) {
	requireShipped(t)
	requireWebhook(t)
	ctx := testContext(t)
	enableStrictDelete(t)
	unconditional := func(id *framework.Identity, ns, n string) error {
		return id.Dynamic.Resource(framework.SandboxGVR).Namespace(ns).Delete(ctx, n, metav1.DeleteOptions{})
	}
	expectGone := func(t *testing.T, ns, n string) {
		t.Helper()
		_, err := env.Admin.Dynamic.Resource(framework.SandboxGVR).Namespace(ns).Get(ctx, n, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("sandbox %s/%s still there after an admitted delete (get: %v)", ns, n, err)
		}
	}

	t.Run("the host's DELETE without preconditions of a Sandbox at epoch 5 is refused", func(t *testing.T) {
		sbx := sandboxWithEpoch(t, "5")
		err := unconditional(env.Host, sbx.GetNamespace(), sbx.GetName())
		framework.ExpectDenied(t, "unconditional delete at epoch 5", err, strictDeleteWebhook,
			"holder-epoch:", "preconditions.resourceVersion", "the stored holder epoch is 5")
		if got := epochOf(t, sbx.GetNamespace(), sbx.GetName()); got != "5" {
			t.Errorf("stored epoch %q after a refused delete, want the Sandbox untouched at 5", got)
		}
	})
	t.Run("the host's fenced DELETE from pkg/fence carrying preconditions.resourceVersion is admitted", func(t *testing.T) {
		sbx := sandboxWithEpoch(t, "5")
		if err := hostClient(t).Delete(ctx, sbx.GetNamespace(), sbx.GetName(), ptr(uint64(5))); err != nil {
			t.Fatalf("fenced delete at epoch 5: %v", err)
		}
		expectGone(t, sbx.GetNamespace(), sbx.GetName())
	})
	t.Run("the host's DELETE without preconditions of a Sandbox at epoch 0 is admitted", func(t *testing.T) {
		sbx := sandboxWithEpoch(t, "0")
		framework.ExpectAdmitted(t, "unconditional delete at epoch 0", unconditional(env.Host, sbx.GetNamespace(), sbx.GetName()))
		expectGone(t, sbx.GetNamespace(), sbx.GetName())
	})
	t.Run("the host's DELETE without preconditions of a Sandbox without an epoch is admitted", func(t *testing.T) {
		sbx := sandboxWithEpoch(t, "")
		framework.ExpectAdmitted(t, "unconditional delete without an epoch", unconditional(env.Host, sbx.GetNamespace(), sbx.GetName()))
		expectGone(t, sbx.GetNamespace(), sbx.GetName())
	})
	t.Run("the other host's DELETE without preconditions in its own namespace is refused", func(t *testing.T) {
		sbx := mustCreate(t, env.OtherHost, framework.SandboxGVR,
			framework.MakeSandbox(env.OtherHostNamespace, name("other")).Annotation(fence.AnnotationHolderEpoch, "5").Obj())
		err := unconditional(env.OtherHost, sbx.GetNamespace(), sbx.GetName())
		framework.ExpectDenied(t, "other host's unconditional delete at epoch 5", err, strictDeleteWebhook, "holder-epoch:")
	})
	t.Run("the operator's DELETE without preconditions of a Sandbox at epoch 5 is admitted", func(t *testing.T) {
		sbx := sandboxWithEpoch(t, "5")
		framework.ExpectAdmitted(t, "operator's unconditional delete at epoch 5", unconditional(env.Operator, sbx.GetNamespace(), sbx.GetName()))
		expectGone(t, sbx.GetNamespace(), sbx.GetName())
	})
}

// enableStrictDelete turns strict delete on for the test and restores the
// default install when it ends, waiting until an unconditional DELETE is
// admitted again so that no later test sees it on.
func enableStrictDelete(t *testing.T) {
	t.Helper()
	ctx := testContext(t)
	probe := sandboxWithEpoch(t, "5")
	dryRunDelete := func(ctx context.Context) framework.Verdict {
		err := env.Host.Dynamic.Resource(framework.SandboxGVR).Namespace(probe.GetNamespace()).Delete(ctx, probe.GetName(),
			metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		return framework.VerdictOf(err)
	}
	// Registered first, so it runs after both switches are restored.
	t.Cleanup(func() {
		err := framework.Eventually(context.Background(), time.Minute, 100*time.Millisecond, "strict delete off again", func(ctx context.Context) (bool, string, error) {
			v := dryRunDelete(ctx)
			return v.Admitted, v.String(), nil
		})
		if err != nil {
			t.Errorf("restoring the default install: %v", err)
		}
	})

	addStrictDeleteWebhook(t)

	configs := env.Admin.Dynamic.Resource(framework.FenceConfigGVR)
	cfg, err := configs.Get(ctx, fencev1.DefaultConfigName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("FenceConfig %s: %v", fencev1.DefaultConfigName, err)
	}
	was, set, _ := unstructured.NestedBool(cfg.Object, "spec", "strictDelete")
	if set && was {
		t.Fatalf("FenceConfig %s already has spec.strictDelete: true; the suite expects the default install", fencev1.DefaultConfigName)
	}
	restore := []byte(`{"spec":{"strictDelete":null}}`)
	if set {
		restore = []byte(`{"spec":{"strictDelete":false}}`)
	}
	t.Cleanup(func() {
		_, err := configs.Patch(context.Background(), fencev1.DefaultConfigName, types.MergePatchType, restore, metav1.PatchOptions{})
		if err != nil {
			t.Errorf("restore FenceConfig spec.strictDelete: %v", err)
		}
	})
	if _, err := configs.Patch(ctx, fencev1.DefaultConfigName, types.MergePatchType, []byte(`{"spec":{"strictDelete":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("set FenceConfig spec.strictDelete: %v", err)
	}

	// The API server's webhook configuration and the webhook's FenceConfig
	// cache both update asynchronously: wait on the refusal itself.
	err = framework.Eventually(ctx, time.Minute, 100*time.Millisecond, "strict delete enforced", func(ctx context.Context) (bool, string, error) {
		v := dryRunDelete(ctx)
		return v.DeniedBy(strictDeleteWebhook, "holder-epoch:") == nil, v.String(), nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// addStrictDeleteWebhook adds the strict-delete component's webhook entry,
// rendered from config/webhook/components/strict-delete on its base as an
// admin would apply it, to the live configuration. Its clientConfig reaches
// the same webhook server as the installed entries (a local URL, or the
// in-cluster Service) with the path the component ships.
func addStrictDeleteWebhook(t *testing.T) {
	t.Helper()
	ctx := testContext(t)
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kubectl, err := framework.Kubectl(root)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := framework.Kustomize(ctx, kubectl,
		componentOnBase(t, root, filepath.Join(root, "config", "webhook", "components", "strict-delete")))
	if err != nil {
		t.Fatal(err)
	}
	hook, err := renderedWebhook(objs, strictDeleteWebhook)
	if err != nil {
		t.Fatal(err)
	}
	if hook.ClientConfig.Service == nil || hook.ClientConfig.Service.Path == nil {
		t.Fatalf("component webhook %s has no service path", strictDeleteWebhook)
	}
	path := *hook.ClientConfig.Service.Path

	vwcs := env.Admin.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		live, err := vwcs.Get(ctx, framework.WebhookConfigName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var base *admissionv1.WebhookClientConfig
		for _, w := range live.Webhooks {
			if w.Name == strictDeleteWebhook {
				return fmt.Errorf("%s already has %s: the suite expects the default install", framework.WebhookConfigName, strictDeleteWebhook)
			}
			if w.Name == ciliumWebhook {
				base = w.ClientConfig.DeepCopy()
			}
		}
		if base == nil {
			return fmt.Errorf("%s has no %s entry to take the server's address from", framework.WebhookConfigName, ciliumWebhook)
		}
		switch {
		case base.URL != nil:
			u, err := url.Parse(*base.URL)
			if err != nil {
				return err
			}
			u.Path = path
			base.URL = ptr(u.String())
		case base.Service != nil:
			base.Service.Path = ptr(path)
		}
		hook.ClientConfig = *base
		live.Webhooks = append(live.Webhooks, *hook)
		_, err = vwcs.Update(ctx, live, metav1.UpdateOptions{FieldManager: framework.FieldManager})
		return err
	})
	if err != nil {
		t.Fatalf("add %s to %s: %v", strictDeleteWebhook, framework.WebhookConfigName, err)
	}
	t.Cleanup(func() {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			live, err := vwcs.Get(context.Background(), framework.WebhookConfigName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			kept := live.Webhooks[:0]
			for _, w := range live.Webhooks {
				if w.Name != strictDeleteWebhook {
					kept = append(kept, w)
				}
			}
			live.Webhooks = kept
			_, err = vwcs.Update(context.Background(), live, metav1.UpdateOptions{FieldManager: framework.FieldManager})
			return err
		})
		if err != nil {
			t.Errorf("remove %s from %s: %v", strictDeleteWebhook, framework.WebhookConfigName, err)
		}
	})
}

// renderedWebhook finds the named webhook in a rendered bundle.
func renderedWebhook(objs []*unstructured.Unstructured, name string) (*admissionv1.ValidatingWebhook, error) {
	for _, o := range objs {
		if o.GetKind() != "ValidatingWebhookConfiguration" {
			continue
		}
		var vwc admissionv1.ValidatingWebhookConfiguration
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &vwc); err != nil {
			return nil, err
		}
		for i := range vwc.Webhooks {
			if vwc.Webhooks[i].Name == name {
				return &vwc.Webhooks[i], nil
			}
		}
	}
	return nil, fmt.Errorf("no webhook %s in the rendered component", name)
}
