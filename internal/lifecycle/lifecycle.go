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
	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/config"
)

// FieldManager is the manager of the fields upgrade-crds writes.
const FieldManager = "sandbox-fence-lifecycle"

// embeddedCRDs are the CRDs this binary was built with, for namespace: the rule
// that refuses the webhook's own ServiceAccount as a host names that
// namespace's, as kustomize's namespace transformer writes it.
func embeddedCRDs(namespace string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	files, err := fs.Glob(config.CRDs, "crd/bases/*.yaml")
	if err != nil {
		return nil, err
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		b, err := fs.ReadFile(config.CRDs, f)
		if err != nil {
			return nil, err
		}
		text := strings.ReplaceAll(string(b), "system:serviceaccount:"+fencev1alpha1.DefaultNamespace+":", "system:serviceaccount:"+namespace+":")
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict([]byte(text), crd); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		crds = append(crds, crd)
	}
	return crds, nil
}

// UpgradeCRDs replaces the spec of each CRD with the one this binary was
// built with, labelled with the release's version, and waits until the API
// server serves it. A replace, not a server-side apply: Helm created the
// CRD from crds/ and owns its fields, so an apply would leave a schema
// property a release removed.
func UpgradeCRDs(ctx context.Context, c client.Client, namespace, version string, logf func(string, ...any)) error {
	crds, err := embeddedCRDs(namespace)
	if err != nil {
		return err
	}
	for _, want := range crds {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(want), crd); err != nil {
				return err
			}
			crd.Spec = want.Spec
			if crd.Labels == nil {
				crd.Labels = map[string]string{}
			}
			maps.Copy(crd.Labels, want.Labels)
			crd.Labels["app.kubernetes.io/version"] = version
			return c.Update(ctx, crd, client.FieldOwner(FieldManager))
		})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("CRD %s is missing: helm install creates it from the chart's crds/; apply those (helm show crds) and upgrade again", want.Name)
		}
		if err != nil {
			return fmt.Errorf("replacing CRD %s: %w", want.Name, err)
		}
		err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			if err := c.Get(ctx, client.ObjectKeyFromObject(want), crd); err != nil {
				return false, err
			}
			return apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.Established), nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s replaced but not established within a minute: %w", want.Name, err)
		}
		logf("CRD %s replaced and established (version %s)", want.Name, version)
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
	crds, err := embeddedCRDs(fencev1alpha1.DefaultNamespace)
	if err != nil {
		return err
	}
	for _, crd := range crds {
		err := c.Delete(ctx, crd)
		switch {
		case apierrors.IsNotFound(err):
			logf("CRD %s: already gone", crd.Name)
		case err != nil:
			return fmt.Errorf("deleting CRD %s: %w", crd.Name, err)
		default:
			logf("deleted CRD %s", crd.Name)
		}
	}
	return nil
}
