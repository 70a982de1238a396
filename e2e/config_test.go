//go:build e2e

package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	fencev1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

// Every bound host gets every check (contract §8.7): the webhook routes only
// ServiceAccounts outside kube-system, so the FenceConfig refuses to bind
// any other identity, with a message saying why. Before the fix the schema
// took any user name, and such a host was fenced by the policy but never
// seen by the webhook: its policy for an invented owner was admitted.
func TestFenceConfigBindsOnlyServiceAccountsOutsideKubeSystem(t *testing.T) {
	ctx := testContext(t)
	configs := env.Admin.Dynamic.Resource(framework.FenceConfigGVR)
	cfg, err := configs.Get(ctx, fencev1.DefaultConfigName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hosts, _, _ := unstructured.NestedSlice(cfg.Object, "spec", "hosts")
	for _, tc := range []struct{ name, username, want string }{
		{"an x509 user", "sandbox-host", "a bound host must be a ServiceAccount"},
		{"an OIDC user", "oidc:alice@example.com", "a bound host must be a ServiceAccount"},
		{"a kube-system ServiceAccount", "system:serviceaccount:kube-system:generic-garbage-collector", "a kube-system ServiceAccount can never be a bound host"},
		{"the webhook's own ServiceAccount", framework.ServiceAccountUser(framework.WebhookNamespace, framework.WebhookName), "the webhook's own ServiceAccount can never be a bound host"},
	} {
		t.Run(tc.name+" is refused as a host", func(t *testing.T) {
			withHost := append(append([]any(nil), hosts...), map[string]any{"username": tc.username, "namespaces": []any{env.HostNamespace}})
			body, err := json.Marshal(map[string]any{"spec": map[string]any{"hosts": withHost}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = configs.Patch(ctx, fencev1.DefaultConfigName, types.MergePatchType, body, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "spec.hosts") {
				t.Fatalf("binding %s: want 422 Invalid on spec.hosts saying %q, got %v", tc.username, tc.want, err)
			}
		})
	}
}
