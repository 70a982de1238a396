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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/sandbox-fence/sandbox-fence/internal/policyconfig"
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
			if d := cmp.Diff(tc.want, checkNamed(t, kc, "Enforcement mode")); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// Strict delete is installed unbound, off until an admin opts in: check
// requires the policy, accepts the binding's absence, and checks the binding
// when an admin applied config/vap/components/strict-delete.
func TestCheckStrictDelete(t *testing.T) {
	labels := map[string]string{"app.kubernetes.io/name": "sandbox-fence"}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: PolicyStrictDelete, Labels: labels}}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: PolicyStrictDelete + "-binding", Labels: labels},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: PolicyStrictDelete, ValidationActions: []admissionregistrationv1.ValidationAction{"Deny"}}}
	// As shipped: the controller has not rendered the (missing) FenceConfig.
	unrendered := policy.DeepCopy()
	unrendered.Spec.Variables = []admissionregistrationv1.Variable{{Name: policyconfig.Variable, Expression: policyconfig.ShippedExpression}}
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
		objs: []runtime.Object{policy, binding},
		want: []CheckResult{
			{Name: "ValidatingAdmissionPolicy " + PolicyStrictDelete, OK: true, Detail: "installed, type-checks"},
			{Name: "ValidatingAdmissionPolicyBinding " + PolicyStrictDelete + "-binding", OK: true, Detail: "binds " + PolicyStrictDelete + ", validationActions [Deny]; strict delete is on where the FenceConfig sets spec.strictDelete"},
		},
	}, {
		name: "not rendered",
		objs: []runtime.Object{unrendered},
		want: []CheckResult{
			{Name: "ValidatingAdmissionPolicy " + PolicyStrictDelete, Detail: `does not carry FenceConfig "sandbox-fence" as it is now (missing there, ` +
				`unrendered in the policy): the controller in the webhook Deployment renders it; check its pods and kubectl get fenceconfig`},
			{Name: "ValidatingAdmissionPolicyBinding " + PolicyStrictDelete + "-binding", OK: true, Detail: "not installed: strict delete is off (opt-in, docs/install.md)"},
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
			got := checks(t, fake.NewClientset(tc.objs...), nil, func(name string) bool { return strings.Contains(name, PolicyStrictDelete) })
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// The policies use CEL and VAP fields of Kubernetes 1.33 (kubeversion.Minimum):
// an older API server must fail the check by name, and one that has the CEL
// race (kubeversion.FirstWithoutCELRace) passes with a warning. A real cluster of each
// version is not at hand, so the server version is faked.
func TestCheckNamesAClusterOlderThanThePoliciesSupport(t *testing.T) {
	cases := []struct {
		name, gitVersion string
		want             CheckResult
	}{{
		name: "one minor below the oldest supported fails", gitVersion: "v1.32.9",
		want: CheckResult{Name: "Kubernetes version", Detail: "v1.32.9 (the policies need 1.33.0 or later)"},
	}, {
		name: "the oldest supported passes and names the CEL race", gitVersion: "v1.33.0",
		want: CheckResult{Name: "Kubernetes version", OK: true, Detail: "v1.33.0 (the policies need 1.33.0 or later); before 1.36.0 kube-apiserver can exit when an admission policy changes, as the bundle's do on every FenceConfig change (kubernetes/kubernetes#135757): upgrade"},
	}, {
		name: "the last patch of the minor before the fix names the race", gitVersion: "v1.35.10",
		want: CheckResult{Name: "Kubernetes version", OK: true, Detail: "v1.35.10 (the policies need 1.33.0 or later); before 1.36.0 kube-apiserver can exit when an admission policy changes, as the bundle's do on every FenceConfig change (kubernetes/kubernetes#135757): upgrade"},
	}, {
		name: "the first release with the fix passes plainly", gitVersion: "v1.36.0",
		want: CheckResult{Name: "Kubernetes version", OK: true, Detail: "v1.36.0 (the policies need 1.33.0 or later)"},
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

// checks runs Check against kc and dc (nil: an empty dynamic client) and
// returns the results whose names keep accepts.
func checks(t *testing.T, kc *fake.Clientset, dc *dynamicfake.FakeDynamicClient, keep func(name string) bool) []CheckResult {
	t.Helper()
	if dc == nil {
		dc = dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	}
	r, err := Check(context.Background(), Clients{Kube: kc, Dynamic: dc}, CheckOptions{
		Options: Options{ConfigName: "sandbox-fence"}, WebhookConfig: DefaultWebhookConfig, WebhookNamespace: DefaultWebhookNamespace})
	if err != nil {
		t.Fatal(err)
	}
	var out []CheckResult
	for _, c := range r.Checks {
		if keep(c.Name) {
			out = append(out, c)
		}
	}
	return out
}

// checkNamed is the result of checks called name; it fails the test when
// there is none.
func checkNamed(t *testing.T, kc *fake.Clientset, name string) CheckResult {
	t.Helper()
	all := checks(t, kc, nil, func(string) bool { return true })
	for _, c := range all {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check named %q in %+v", name, all)
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

// An opted-in namespace that lets a pod onto the host's network, or a
// cluster without the baseline policy, leaves sandbox pods outside every
// policy; check names each.
func TestCheckConfinement(t *testing.T) {
	ns := func(name, level string) *corev1.Namespace {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"fence.sandbox.namzu.ai/enabled": "true"}}}
		if level != "" {
			n.Labels[podSecurityEnforce] = level
		}
		return n
	}
	baseline := func(selects bool) runtime.Object {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cilium.io/v2", "kind": "CiliumClusterwideNetworkPolicy",
			"metadata": map[string]any{"name": BaselineName}, "spec": map[string]any{"endpointSelector": map[string]any{"matchLabels": map[string]any{}}}}}
		if selects {
			u.Object["spec"].(map[string]any)["endpointSelector"].(map[string]any)["matchLabels"] = map[string]any{
				"k8s:io.cilium.k8s.namespace.labels.fence.sandbox.namzu.ai/enabled": "true"}
		}
		return u
	}
	cases := []struct {
		name string
		nss  []runtime.Object
		ccnp []runtime.Object
		want []CheckResult
	}{{
		name: "baseline and restricted Pod Security, and the baseline policy",
		nss:  []runtime.Object{ns("a", "baseline"), ns("b", "restricted")},
		ccnp: []runtime.Object{baseline(true)},
		want: []CheckResult{{Name: "Pod Security", OK: true, Detail: "every opted-in namespace enforces baseline or restricted"},
			{Name: "CiliumClusterwideNetworkPolicy sandbox-fence-baseline", OK: true, Detail: "selects every pod of the opted-in namespaces"}},
	}, {
		name: "a namespace without Pod Security enforcement and one that is privileged",
		nss:  []runtime.Object{ns("a", ""), ns("b", "privileged"), ns("c", "baseline")},
		ccnp: []runtime.Object{baseline(true)},
		want: []CheckResult{{Name: "Pod Security", Detail: "opted-in namespaces without pod-security.kubernetes.io/enforce=baseline or restricted, " +
			"where a sandbox pod may use the host's network and escape every policy: a (none), b (privileged)"},
			{Name: "CiliumClusterwideNetworkPolicy sandbox-fence-baseline", OK: true, Detail: "selects every pod of the opted-in namespaces"}},
	}, {
		name: "no baseline policy",
		nss:  []runtime.Object{ns("a", "baseline")},
		want: []CheckResult{{Name: "Pod Security", OK: true, Detail: "every opted-in namespace enforces baseline or restricted"},
			{Name: "CiliumClusterwideNetworkPolicy sandbox-fence-baseline", Detail: "not installed: a sandbox pod no per-sandbox policy selects reaches everything; " +
				"apply config/components/cilium-baseline (docs/install.md, The baseline)"}},
	}, {
		name: "a baseline policy that selects something else",
		nss:  []runtime.Object{ns("a", "baseline")},
		ccnp: []runtime.Object{baseline(false)},
		want: []CheckResult{{Name: "Pod Security", OK: true, Detail: "every opted-in namespace enforces baseline or restricted"},
			{Name: "CiliumClusterwideNetworkPolicy sandbox-fence-baseline", Detail: `does not select the opted-in namespaces ` +
				`(endpointSelector.matchLabels k8s:io.cilium.k8s.namespace.labels.fence.sandbox.namzu.ai/enabled: "true")`}},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kc := fake.NewClientset(tc.nss...)
			dc := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
				map[schema.GroupVersionResource]string{ccnpGVR: "CiliumClusterwideNetworkPolicyList"}, tc.ccnp...)
			got := checks(t, kc, dc, func(name string) bool {
				return name == "Pod Security" || strings.HasPrefix(name, "CiliumClusterwideNetworkPolicy")
			})
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}
