//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

// readyz reads one of the webhook's readiness endpoints.
func readyz(ctx context.Context, probe, path string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+probe+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// TestWebhookWaitsForMissingCRDsAndBecomesReady starts the webhook on a
// control plane without the agent-sandbox, Cilium and FenceConfig CRDs:
// it must stay up (no exit, so no crashloop in a Pod), answer not ready
// with a message naming each missing API by group, version and resource,
// record a PrerequisitesMissing Event, narrow the message as CRDs appear,
// and turn ready by itself once the last one is established (issue 15;
// docs/webhook.md, Prerequisites).
func TestWebhookWaitsForMissingCRDsAndBecomesReady(t *testing.T) {
	fc := newFreshCluster(t, false)
	ctx := freshContext(t)
	if _, err := fc.env.Admin.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: framework.WebhookNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w := fc.newLocalWebhook(t, "prereq", fc.cp.AdminConfig())
	w.start()

	alive := func() {
		t.Helper()
		if exited, err := w.proc.Exited(); exited {
			t.Fatalf("the webhook exited (%v); log:\n%s", err, w.proc.Tail(30))
		}
	}
	// waitMessage polls /readyz/prerequisites until its 500 body has every
	// want and none of the absent.
	waitMessage := func(step string, want, absent []string) {
		t.Helper()
		err := framework.Eventually(ctx, time.Minute, 100*time.Millisecond, step, func(ctx context.Context) (bool, string, error) {
			alive()
			code, body, err := readyz(ctx, w.probe, "/readyz/prerequisites")
			if err != nil {
				return false, err.Error(), nil
			}
			if code != http.StatusInternalServerError {
				return false, fmt.Sprintf("HTTP %d: %s", code, body), nil
			}
			for _, s := range want {
				if !strings.Contains(body, s) {
					return false, body, nil
				}
			}
			for _, s := range absent {
				if strings.Contains(body, s) {
					return false, body, nil
				}
			}
			return true, "", nil
		})
		if err != nil {
			t.Fatalf("%v; webhook log:\n%s", err, w.proc.Tail(20))
		}
		if code, body, err := readyz(ctx, w.probe, "/readyz"); err != nil || code == http.StatusOK {
			t.Fatalf("/readyz answered %d (%v) with %s missing: %s", code, err, want, body)
		}
	}
	sandboxes := "sandboxes.agents.x-k8s.io (agents.x-k8s.io/v1beta1/sandboxes"
	claims := "sandboxclaims.extensions.agents.x-k8s.io (extensions.agents.x-k8s.io/v1beta1/sandboxclaims"
	cnps := "ciliumnetworkpolicies.cilium.io (cilium.io/v2/ciliumnetworkpolicies"
	configs := "fenceconfigs.fence.sandbox.namzu.ai (fence.sandbox.namzu.ai/v1alpha1/fenceconfigs"
	waitMessage("not ready, naming all four", []string{sandboxes, claims, cnps, configs, "docs/install.md, Prerequisites"}, nil)

	// The Event, on the webhook's Deployment (no Pod here; in a cluster it
	// is on the Pod, --pod-name from the downward API).
	err := framework.Eventually(ctx, time.Minute, 200*time.Millisecond, "a PrerequisitesMissing Event", func(ctx context.Context) (bool, string, error) {
		evs, err := fc.env.Admin.Kube.CoreV1().Events(framework.WebhookNamespace).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", "PrerequisitesMissing").String()})
		if err != nil {
			return false, "", err
		}
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning && e.InvolvedObject.Kind == "Deployment" && strings.Contains(e.Message, cnps) {
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("%d Events", len(evs.Items)), nil
	})
	if err != nil {
		t.Fatal(err)
	}

	if err := fc.env.InstallCRDs(ctx, fc.crds(t, "agents.x-k8s.io", "extensions.agents.x-k8s.io", "fence.sandbox.namzu.ai")); err != nil {
		t.Fatal(err)
	}
	waitMessage("not ready, naming only the Cilium CRD", []string{cnps}, []string{sandboxes, claims, configs})

	if err := fc.env.InstallCRDs(ctx, fc.crds(t, "cilium.io")); err != nil {
		t.Fatal(err)
	}
	if err := w.waitReady(ctx); err != nil {
		t.Fatalf("not ready after every CRD was established: %v", err)
	}
	alive()
	if code, body, _ := readyz(ctx, w.probe, "/readyz/prerequisites"); code != http.StatusOK {
		t.Fatalf("/readyz/prerequisites answered %d: %s", code, body)
	}
	err = framework.Eventually(ctx, time.Minute, 200*time.Millisecond, "a PrerequisitesMet Event", func(ctx context.Context) (bool, string, error) {
		evs, err := fc.env.Admin.Kube.CoreV1().Events(framework.WebhookNamespace).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", "PrerequisitesMet").String()})
		if err != nil {
			return false, "", err
		}
		return len(evs.Items) > 0, "none yet", nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWebhookReadsOnlyItsOwnCertificateSecret checks the shipped rotation
// RBAC (config/webhook/base/rbac-cert-rotation.yaml) on the API server, as
// the webhook's ServiceAccount: a list of the namespace's Secrets is
// refused, the same list narrowed to the certificate Secret by
// fieldSelector metadata.name (what the rotation's informer sends,
// cmd/webhook/rotation.go) is admitted, and another Secret cannot be read.
func TestWebhookReadsOnlyItsOwnCertificateSecret(t *testing.T) {
	requireShipped(t)
	ctx := testContext(t)
	const certSecret = "sandbox-fence-webhook-cert"
	if _, err := env.Admin.Kube.RbacV1().Roles(framework.WebhookNamespace).Get(ctx, "sandbox-fence-webhook-cert-rotation", metav1.GetOptions{}); apierrors.IsNotFound(err) {
		t.Fatal("the rotation Role is not installed (config/webhook installs it with self-managed certificates)")
	}
	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "e2e-not-the-webhooks", Namespace: framework.WebhookNamespace}, StringData: map[string]string{"k": "v"}}
	if _, err := env.Admin.Kube.CoreV1().Secrets(framework.WebhookNamespace).Create(ctx, other, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Admin.Kube.CoreV1().Secrets(framework.WebhookNamespace).Delete(context.Background(), other.Name, metav1.DeleteOptions{})
	})
	tr, err := env.Admin.Kube.CoreV1().ServiceAccounts(framework.WebhookNamespace).CreateToken(ctx, framework.WebhookName,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(env.Admin.Config)
	cfg.BearerToken = tr.Status.Token
	sa, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	secrets := sa.CoreV1().Secrets(framework.WebhookNamespace)

	if _, err := secrets.List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing every Secret of %s as the webhook: %v, want Forbidden", framework.WebhookNamespace, err)
	}
	l, err := secrets.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + certSecret})
	if err != nil {
		t.Errorf("listing its certificate Secret by field selector as the webhook: %v, want it admitted", err)
	} else if len(l.Items) != 1 {
		t.Errorf("the narrowed list returned %d Secrets, want 1", len(l.Items))
	}
	wi, err := secrets.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + certSecret})
	if err != nil {
		t.Errorf("watching its certificate Secret by field selector as the webhook: %v, want it admitted", err)
	} else {
		wi.Stop()
	}
	if _, err := secrets.Get(ctx, other.Name, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("reading another Secret as the webhook: %v, want Forbidden", err)
	}
	if _, err := secrets.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + other.Name}); !apierrors.IsForbidden(err) {
		t.Errorf("listing another Secret by name as the webhook: %v, want Forbidden", err)
	}
	if _, err := sa.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing every webhook configuration as the webhook: %v, want Forbidden", err)
	}
	if _, err := sa.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + framework.WebhookName}); err != nil {
		t.Errorf("listing its own webhook configuration by field selector: %v, want it admitted", err)
	}
}
