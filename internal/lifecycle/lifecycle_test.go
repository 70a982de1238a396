package lifecycle

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/yaml"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
)

// upgrade-crds replaces the spec whole: a property an older release's CRD
// had, and this one's lacks, is gone; labels others set stay. The new spec
// refuses the release namespace's webhook ServiceAccount as a host, where
// the chart's untemplated crds/ name the default namespace's.
func TestUpgradeCRDsReplacesTheSpecAndLabelsTheVersion(t *testing.T) {
	want, err := embeddedCRDs("team-a")
	if err != nil {
		t.Fatal(err)
	}
	old := want[0].DeepCopy()
	old.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["removedProperty"] = apiextensionsv1.JSONSchemaProps{Type: "string"}
	old.Labels = map[string]string{"admin": "kept"}
	old.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue}}
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(old).Build()
	if err := UpgradeCRDs(context.Background(), c, "team-a", "0.1.1", t.Logf); err != nil {
		t.Fatal(err)
	}
	got := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(want[0]), got); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want[0].Spec, got.Spec); d != "" {
		t.Errorf("the CRD's spec after upgrade-crds (-want +got):\n%s", d)
	}
	if b, _ := yaml.Marshal(got.Spec); !strings.Contains(string(b), "'system:serviceaccount:team-a:sandbox-fence-webhook'") ||
		strings.Contains(string(b), fencev1alpha1.DefaultNamespace) {
		t.Errorf("the CRD's host rule does not name team-a's webhook ServiceAccount alone:\n%s", b)
	}
	if d := cmp.Diff(map[string]string{"admin": "kept", "app.kubernetes.io/version": "0.1.1"}, got.Labels); d != "" {
		t.Errorf("the CRD's labels after upgrade-crds (-want +got):\n%s", d)
	}
}

// unfence deletes the release's callers before what they call, and
// nothing of another release or of a kustomize install.
func TestUnfenceDeletesTheReleasesWebhookThenBindingsThenPolicies(t *testing.T) {
	helm := func(release string) map[string]string {
		return map[string]string{"app.kubernetes.io/instance": release, "app.kubernetes.io/managed-by": "Helm"}
	}
	meta := func(name string, labels map[string]string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Labels: labels}
	}
	objs := []client.Object{
		&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: meta("a-policy", helm("a"))},
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: meta("a-binding", helm("a"))},
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: meta("a-webhook", helm("a"))},
		&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: meta("b-policy", helm("b"))},
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: meta("kustomize-webhook", map[string]string{"app.kubernetes.io/instance": "a"})},
	}
	var deleted []string
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			deleted = append(deleted, obj.GetName())
			return c.Delete(ctx, obj, opts...)
		},
	}).Build()
	if err := Unfence(context.Background(), c, "a", t.Logf); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"a-webhook", "a-binding", "a-policy"}, deleted); d != "" {
		t.Errorf("unfence deleted (-want +got):\n%s", d)
	}
}

func scheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}
