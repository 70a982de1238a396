package peers

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sandbox-fence/sandbox-fence/e2e/cluster"
	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

// identity applies the engine's namespace, ServiceAccount and upstream RBAC
// (e2e/bench/peers/<engine>/rbac.yaml) and writes a kubeconfig with a
// TokenRequest token of that ServiceAccount: the engine runs with what its
// release grants it, as our webhook runs with its ServiceAccount and the
// shipped RBAC (provider.Local.webhookKubeconfig), not as system:masters.
func (e *Engine) identity(ctx context.Context, env *framework.Env, cp *cluster.ControlPlane) (string, error) {
	file := filepath.Join(e.repoRoot, "e2e", "bench", "peers", e.name, "rbac.yaml")
	objs, err := framework.ReadYAMLFile(file)
	if err != nil {
		return "", err
	}
	if err := env.Apply(ctx, objs, framework.ApplyOptions{}); err != nil {
		return "", err
	}
	var ns, sa string
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount":
			ns, sa = o.GetNamespace(), o.GetName()
		case "ClusterRole":
			if err := waitAggregated(ctx, env, o, objs); err != nil {
				return "", err
			}
		}
	}
	if sa == "" {
		return "", fmt.Errorf("%s has no ServiceAccount", file)
	}
	path := filepath.Join(cp.StateDir(), e.name+".kubeconfig")
	if err := cp.WriteServiceAccountKubeconfig(ctx, env.Admin.Kube, ns, sa, path); err != nil {
		return "", fmt.Errorf("%s: %w", e.name, err)
	}
	return path, nil
}

// waitAggregated waits, for a ClusterRole with an aggregationRule, until the
// controller manager's aggregation controller has copied into it the rules
// of every ClusterRole of objs it selects: the engine would otherwise start
// with part of its permissions.
func waitAggregated(ctx context.Context, env *framework.Env, role *unstructured.Unstructured, objs []*unstructured.Unstructured) error {
	var agg rbacv1.ClusterRole
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(role.Object, &agg); err != nil || agg.AggregationRule == nil {
		return err
	}
	want := 0
	for _, o := range objs {
		if o.GetKind() != "ClusterRole" {
			continue
		}
		for _, s := range agg.AggregationRule.ClusterRoleSelectors {
			if sel, err := metav1.LabelSelectorAsSelector(&s); err == nil && sel.Matches(labels.Set(o.GetLabels())) {
				rules, _ := o.Object["rules"].([]any)
				want += len(rules)
				break
			}
		}
	}
	return framework.Eventually(ctx, time.Minute, 100*time.Millisecond, "ClusterRole "+agg.Name+" aggregated", func(ctx context.Context) (bool, string, error) {
		cr, err := env.Admin.Kube.RbacV1().ClusterRoles().Get(ctx, agg.Name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return len(cr.Rules) >= want, fmt.Sprintf("%d of %d rules", len(cr.Rules), want), nil
	})
}
