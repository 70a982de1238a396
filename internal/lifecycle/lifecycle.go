// Package lifecycle holds the steps of an install's lifecycle that Helm
// cannot take in the right order itself. The chart runs each as a hook Job,
// `webhook lifecycle STEP` (docs/install.md, Install with Helm):
//
//   - upgrade-crds, before an upgrade: Helm installs a chart's crds/ once and
//     never upgrades them, so a new FenceConfig field would be unknown to
//     the API server the new webhook reads. The CRD's spec is replaced with
//     the one this binary was built with.
//   - unfence, before an uninstall: Helm deletes the Deployment and the
//     Service before the kinds it does not know, the webhook configuration
//     among them, which would leave a fail-closed webhook without its pods.
//     The webhook configuration goes first, while its pods still answer,
//     then the bindings, then the policies they bind.
//   - delete-crds, after an uninstall that does not keep them (crds.keep).
package lifecycle

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/sandbox-fence/sandbox-fence/config"
)

// FieldManager is the manager of the fields upgrade-crds writes.
const FieldManager = "sandbox-fence-lifecycle"

// shippedNamespace is the namespace config/crd's rules name; the chart's
// crds/ keep it, as Helm installs them untemplated.
const shippedNamespace = "sandbox-fence-system"

// CRDs are the CRDs this binary was built with, for namespace: the rule
// that refuses the webhook's own ServiceAccount as a host names that
// namespace's, as kustomize's namespace transformer writes it.
func CRDs(namespace string) ([]*unstructured.Unstructured, error) {
	files, err := fs.Glob(config.CRDs, "crd/bases/*.yaml")
	if err != nil {
		return nil, err
	}
	var crds []*unstructured.Unstructured
	for _, f := range files {
		b, err := fs.ReadFile(config.CRDs, f)
		if err != nil {
			return nil, err
		}
		text := strings.ReplaceAll(string(b), "system:serviceaccount:"+shippedNamespace+":", "system:serviceaccount:"+namespace+":")
		j, err := yaml.YAMLToJSON([]byte(text))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		crds = append(crds, u)
	}
	return crds, nil
}

// UpgradeCRDs replaces the spec of each CRD with the one this binary was
// built with, labelled with the release's version, and waits until the API
// server serves it. A replace, not a server-side apply: Helm created the
// CRD from crds/ and owns its fields, so an apply would leave a schema
// property a release removed.
func UpgradeCRDs(ctx context.Context, c client.Client, namespace, version string, logf func(string, ...any)) error {
	crds, err := CRDs(namespace)
	if err != nil {
		return err
	}
	for _, want := range crds {
		crd := &unstructured.Unstructured{}
		crd.SetGroupVersionKind(want.GroupVersionKind())
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(want), crd); err != nil {
				return err
			}
			crd.Object["spec"] = want.Object["spec"]
			labels := crd.GetLabels()
			if labels == nil {
				labels = map[string]string{}
			}
			maps.Copy(labels, want.GetLabels())
			labels["app.kubernetes.io/version"] = version
			crd.SetLabels(labels)
			return c.Update(ctx, crd, client.FieldOwner(FieldManager))
		})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("CRD %s is missing: helm install creates it from the chart's crds/; apply those (helm show crds) and upgrade again", want.GetName())
		}
		if err != nil {
			return fmt.Errorf("replacing CRD %s: %w", want.GetName(), err)
		}
		err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			if err := c.Get(ctx, client.ObjectKeyFromObject(want), crd); err != nil {
				return false, err
			}
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, cond := range conds {
				m, _ := cond.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s replaced but not established within a minute: %w", want.GetName(), err)
		}
		logf("CRD %s replaced and established (version %s)", want.GetName(), version)
	}
	return nil
}

// Unfence deletes release's webhook configurations, then its bindings, then
// its policies: nothing then calls the webhook or binds a policy to a
// FenceConfig Helm is about to delete.
func Unfence(ctx context.Context, c client.Client, release string, logf func(string, ...any)) error {
	sel := client.MatchingLabels{"app.kubernetes.io/instance": release, "app.kubernetes.io/managed-by": "Helm"}
	steps := []struct {
		what string
		list client.ObjectList
	}{
		{"ValidatingWebhookConfiguration", &admissionregistrationv1.ValidatingWebhookConfigurationList{}},
		{"ValidatingAdmissionPolicyBinding", &admissionregistrationv1.ValidatingAdmissionPolicyBindingList{}},
		{"ValidatingAdmissionPolicy", &admissionregistrationv1.ValidatingAdmissionPolicyList{}},
	}
	for _, s := range steps {
		if err := c.List(ctx, s.list, sel); err != nil {
			return fmt.Errorf("listing release %s's %ss: %w", release, s.what, err)
		}
		items, err := meta.ExtractList(s.list)
		if err != nil {
			return err
		}
		for _, item := range items {
			o := item.(client.Object)
			if err := c.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting %s %s: %w", s.what, o.GetName(), err)
			}
			logf("deleted %s %s", s.what, o.GetName())
		}
	}
	return nil
}

// DeleteCRDs deletes the CRDs this binary was built with, and with them
// every object of their kinds.
func DeleteCRDs(ctx context.Context, c client.Client, logf func(string, ...any)) error {
	crds, err := CRDs(shippedNamespace)
	if err != nil {
		return err
	}
	for _, crd := range crds {
		err := c.Delete(ctx, crd)
		switch {
		case apierrors.IsNotFound(err):
			logf("CRD %s: already gone", crd.GetName())
		case err != nil:
			return fmt.Errorf("deleting CRD %s: %w", crd.GetName(), err)
		default:
			logf("deleted CRD %s", crd.GetName())
		}
	}
	return nil
}
