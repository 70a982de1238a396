package fencectl

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	tst "github.com/sandbox-fence/sandbox-fence/internal/testing"
)

// The webhook's side of the enforcement mode is read from its Deployment,
// which the e2e local provider does not run: a binding in one mode and the
// webhook in another must fail the check, and the last --enforcement wins
// as in the binary's flag parsing.
func TestCheckComparesTheWebhooksModeWithTheBindings(t *testing.T) {
	cases := []struct {
		name    string
		actions []admissionregistrationv1.ValidationAction
		args    []string
		want    CheckResult
	}{{
		name: "bindings and webhook both deny", actions: []admissionregistrationv1.ValidationAction{"Deny"},
		args: []string{"--port=9443"},
		want: CheckResult{Name: "Enforcement mode", OK: true, Detail: "deny (bindings and webhook)"},
	}, {
		name: "bindings warn but the webhook denies", actions: []admissionregistrationv1.ValidationAction{"Warn", "Audit"},
		args: []string{"--enforcement=warn", "--enforcement=deny"},
		want: CheckResult{Name: "Enforcement mode", Detail: "bindings are warn but the webhook runs --enforcement=deny"},
	}, {
		name: "the component's appended flag wins", actions: []admissionregistrationv1.ValidationAction{"Audit"},
		args: []string{"--enforcement=deny", "--enforcement=audit"},
		want: CheckResult{Name: "Enforcement mode", OK: true, Detail: "audit (bindings and webhook)"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			labels := map[string]string{"app.kubernetes.io/name": "sandbox-fence"}
			kc := fake.NewClientset(
				&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: PolicyHolderEpoch, Labels: labels}},
				&admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: PolicyHolderEpoch + "-binding", Labels: labels},
					Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: PolicyHolderEpoch, ValidationActions: tc.actions}},
				&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: DefaultWebhookConfig, Namespace: DefaultWebhookNamespace},
					Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "webhook", Args: tc.args}}}}}},
			)
			dc := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
			r, err := Check(context.Background(), Clients{Kube: kc, Dynamic: dc}, CheckOptions{
				Options: Options{ConfigName: "sandbox-fence"}, WebhookConfig: DefaultWebhookConfig, WebhookNamespace: DefaultWebhookNamespace})
			if err != nil {
				t.Fatal(err)
			}
			var got CheckResult
			for _, c := range r.Checks {
				if c.Name == "Enforcement mode" {
					got = c
				}
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// Strict delete is installed unbound (contract §8.4): check requires the
// policy, accepts the binding's absence, and checks the binding when an
// admin applied config/vap/components/strict-delete.
func TestCheckStrictDelete(t *testing.T) {
	labels := map[string]string{"app.kubernetes.io/name": "sandbox-fence"}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: PolicyStrictDelete, Labels: labels}}
	binding := func(param string) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
		b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: PolicyStrictDelete + "-binding", Labels: labels},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: PolicyStrictDelete, ValidationActions: []admissionregistrationv1.ValidationAction{"Deny"}}}
		if param != "" {
			b.Spec.ParamRef = &admissionregistrationv1.ParamRef{Name: param}
		}
		return b
	}
	cases := []struct {
		name string
		objs []runtime.Object
		want []CheckResult
	}{{
		name: "installed unbound",
		objs: []runtime.Object{policy},
		want: []CheckResult{
			{Name: "ValidatingAdmissionPolicy " + PolicyStrictDelete, OK: true, Detail: "installed, type-checks"},
			{Name: "ValidatingAdmissionPolicyBinding " + PolicyStrictDelete + "-binding", OK: true, Detail: "not installed: strict delete is off (opt-in, docs/install.md)"},
		},
	}, {
		name: "bound",
		objs: []runtime.Object{policy, binding("sandbox-fence")},
		want: []CheckResult{
			{Name: "ValidatingAdmissionPolicy " + PolicyStrictDelete, OK: true, Detail: "installed, type-checks"},
			{Name: "ValidatingAdmissionPolicyBinding " + PolicyStrictDelete + "-binding", OK: true, Detail: "binds " + PolicyStrictDelete + ", validationActions [Deny]; strict delete is on where the FenceConfig sets spec.strictDelete"},
		},
	}, {
		name: "bound to another FenceConfig",
		objs: []runtime.Object{policy, binding("other")},
		want: []CheckResult{
			{Name: "ValidatingAdmissionPolicy " + PolicyStrictDelete, OK: true, Detail: "installed, type-checks"},
			{Name: "ValidatingAdmissionPolicyBinding " + PolicyStrictDelete + "-binding", Detail: `its paramRef does not name the FenceConfig "sandbox-fence"`},
		},
	}, {
		name: "not installed",
		objs: nil,
		want: []CheckResult{
			{Name: "ValidatingAdmissionPolicy " + PolicyStrictDelete, Detail: "not installed (or not labelled app.kubernetes.io/name=sandbox-fence): config/vap installs it unbound"},
			{Name: "ValidatingAdmissionPolicyBinding " + PolicyStrictDelete + "-binding", OK: true, Detail: "not installed: strict delete is off (opt-in, docs/install.md)"},
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kc := fake.NewClientset(tc.objs...)
			dc := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
			r, err := Check(context.Background(), Clients{Kube: kc, Dynamic: dc}, CheckOptions{
				Options: Options{ConfigName: "sandbox-fence"}, WebhookConfig: DefaultWebhookConfig, WebhookNamespace: DefaultWebhookNamespace})
			if err != nil {
				t.Fatal(err)
			}
			var got []CheckResult
			for _, c := range r.Checks {
				if strings.Contains(c.Name, PolicyStrictDelete) {
					got = append(got, c)
				}
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// The policies use CEL and VAP fields of Kubernetes 1.33 (MinKubernetes): an
// older API server must fail the check by name. A real cluster of each
// version is not at hand, so the server version is faked.
func TestCheckNamesAClusterOlderThanThePoliciesSupport(t *testing.T) {
	cases := []struct {
		name, gitVersion string
		want             CheckResult
	}{{
		name: "one minor below the oldest supported fails", gitVersion: "v1.32.9",
		want: CheckResult{Name: "Kubernetes version", Detail: "v1.32.9 (the policies need 1.33.0 or later)"},
	}, {
		name: "the oldest supported passes", gitVersion: "v1.33.0",
		want: CheckResult{Name: "Kubernetes version", OK: true, Detail: "v1.33.0 (the policies need 1.33.0 or later)"},
	}, {
		name: "a vendor build of a newer release passes", gitVersion: "v1.37.2-eks-4f1a2b",
		want: CheckResult{Name: "Kubernetes version", OK: true, Detail: "v1.37.2-eks-4f1a2b (the policies need 1.33.0 or later)"},
	}, {
		name: "a version that does not parse fails", gitVersion: "latest",
		want: CheckResult{Name: "Kubernetes version", Detail: `cannot parse "latest": could not parse "latest" as version`},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kc := fake.NewClientset()
			kc.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{GitVersion: tc.gitVersion}
			if d := cmp.Diff(tc.want, checkNamed(t, kc, "Kubernetes version")); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// A caBundle the API server cannot verify the webhook with refuses every
// write the webhook is called for (failurePolicy Fail): check must name it.
func TestCheckNamesAnUnusableCABundle(t *testing.T) {
	valid, expired := selfSigned(t, time.Now().Add(time.Hour)), selfSigned(t, time.Now().Add(-time.Hour))
	name := "Webhook cilium-egress.fence.sandbox.namzu.ai CA bundle"
	cases := []struct {
		name   string
		bundle []byte
		want   CheckResult
	}{{
		name: "an empty bundle fails", bundle: nil,
		want: CheckResult{Name: name, Detail: "empty: the API server cannot verify the webhook (is the certificate rotation or cert-manager's cainjector running?)"},
	}, {
		name: "a bundle without a PEM certificate fails", bundle: []byte("not a certificate"),
		want: CheckResult{Name: name, Detail: "holds no PEM certificate"},
	}, {
		name: "a bundle of expired certificates fails", bundle: expired.pem,
		want: CheckResult{Name: name, Detail: "every certificate in it has expired (1)"},
	}, {
		name: "an expired certificate beside a valid one passes", bundle: append(append([]byte{}, expired.pem...), valid.pem...),
		want: CheckResult{Name: name, OK: true, Detail: "1 certificate(s), valid until " + valid.notAfter.UTC().Format(time.RFC3339)},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kc := fake.NewClientset(&admissionregistrationv1.ValidatingWebhookConfiguration{
				ObjectMeta: metav1.ObjectMeta{Name: DefaultWebhookConfig},
				Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "cilium-egress.fence.sandbox.namzu.ai",
					ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: tc.bundle,
						Service: &admissionregistrationv1.ServiceReference{Namespace: DefaultWebhookNamespace, Name: DefaultWebhookConfig}}}},
			})
			if d := cmp.Diff(tc.want, checkNamed(t, kc, name)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// checkNamed runs Check against kc (and an empty dynamic client) and returns
// the result called name; it fails the test when there is none.
func checkNamed(t *testing.T, kc *fake.Clientset, name string) CheckResult {
	t.Helper()
	r, err := Check(context.Background(), Clients{Kube: kc, Dynamic: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())}, CheckOptions{
		Options: Options{ConfigName: "sandbox-fence"}, WebhookConfig: DefaultWebhookConfig, WebhookNamespace: DefaultWebhookNamespace})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check named %q in %+v", name, r.Checks)
	return CheckResult{}
}

type testCert struct {
	pem      []byte
	notAfter time.Time
}

// selfSigned is a CA certificate valid until notAfter (truncated to the
// second, as X.509 stores it).
func selfSigned(t *testing.T, notAfter time.Time) testCert {
	t.Helper()
	notAfter = notAfter.Truncate(time.Second)
	return testCert{pem: tst.SelfSignedCAPEM(t, "test", notAfter), notAfter: notAfter}
}
