package peers

import (
	"encoding/base64"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// gatekeeperWebhookConfig is Gatekeeper's validating webhook as its release
// manifest ships it, with two changes a fence needs: failurePolicy Fail (the
// release default is Ignore, which would let every write through while
// Gatekeeper is down) and rules limited to what the fence checks (the
// release routes every resource of every group to Gatekeeper, which would
// charge the ConfigMap control workload for it too; limiting it is the
// peer's best case). DELETE is routed for CiliumNetworkPolicies (the
// name-prefix rule holds on DELETE) and for claims and Sandboxes (the orphan
// rule).
func gatekeeperWebhookConfig(host string, caPEM []byte) *unstructured.Unstructured {
	rule := func(group string, versions []string, resource string, ops ...string) map[string]any {
		return map[string]any{
			"apiGroups": []any{group}, "apiVersions": toAny(versions), "resources": []any{resource},
			"operations": toAny(ops), "scope": "Namespaced",
		}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1",
		"kind":       "ValidatingWebhookConfiguration",
		"metadata": map[string]any{
			"name":   "gatekeeper-validating-webhook-configuration",
			"labels": map[string]any{"gatekeeper.sh/system": "yes"},
		},
		"webhooks": []any{map[string]any{
			"name":                    "validation.gatekeeper.sh",
			"admissionReviewVersions": []any{"v1", "v1beta1"},
			"clientConfig": map[string]any{
				"url":      "https://" + host + "/v1/admit",
				"caBundle": base64.StdEncoding.EncodeToString(caPEM),
			},
			"failurePolicy":  "Fail",
			"matchPolicy":    "Exact",
			"sideEffects":    "None",
			"timeoutSeconds": int64(3),
			"namespaceSelector": map[string]any{"matchExpressions": []any{map[string]any{
				"key": "admission.gatekeeper.sh/ignore", "operator": "DoesNotExist",
			}}},
			"rules": []any{
				// DELETE and the claims for the orphan rule.
				rule("agents.x-k8s.io", []string{"v1beta1", "v1alpha1"}, "sandboxes", "CREATE", "UPDATE", "DELETE"),
				rule("extensions.agents.x-k8s.io", []string{"v1beta1", "v1alpha1"}, "sandboxclaims", "CREATE", "UPDATE", "DELETE"),
				rule("cilium.io", []string{"v2"}, "ciliumnetworkpolicies", "CREATE", "UPDATE", "DELETE"),
			},
		}},
	}}
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
