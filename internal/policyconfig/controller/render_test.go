package controller

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	admissionregistrationv1ac "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/internal/policyconfig"
)

// The routing to the owner check opens before the policies admit a host,
// and closes only once the API server has taken up the policies that
// refuse: on kind, the policies first let 3 of 318 must-refuse writes
// through during an upgrade.
func TestRenderOpensTheRoutingFirstAndClosesItLast(t *testing.T) {
	host := &fencev1alpha1.FenceConfig{ObjectMeta: metav1.ObjectMeta{Name: "sandbox-fence"}}
	host.Spec.Hosts = []fencev1alpha1.Host{{Username: "system:serviceaccount:sbx:host", Namespaces: []string{"sbx"}}}
	cases := []struct {
		name    string
		cfg     *fencev1alpha1.FenceConfig
		want    []string
		settles bool // the routing waits for the API server to take up the policies
	}{
		{"a configuration that routes a host", host, []string{"ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy"}, false},
		{"a missing configuration", nil, []string{"ValidatingAdmissionPolicy", "ValidatingWebhookConfiguration"}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Both objects hold the other state than the one rendered, so
			// both must be written.
			stale := policyconfig.FromFenceConfig("sandbox-fence", host)
			if tc.cfg != nil {
				stale = policyconfig.FromFenceConfig("sandbox-fence", nil)
			}
			vap := &admissionregistrationv1.ValidatingAdmissionPolicy{
				ObjectMeta: metav1.ObjectMeta{Name: "egress", Labels: map[string]string{policyconfig.RenderLabel: "sandbox-fence"}},
				Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{Variables: []admissionregistrationv1.Variable{
					{Name: policyconfig.Variable, Expression: stale.Expression()}}},
			}
			vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
				ObjectMeta: metav1.ObjectMeta{Name: "sandbox-fence-webhook"},
				Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "w", MatchConditions: []admissionregistrationv1.MatchCondition{
					{Name: policyconfig.MatchCondition, Expression: stale.MatchConditionExpression()}}}},
			}
			scheme := runtime.NewScheme()
			if err := clientgoscheme.AddToScheme(scheme); err != nil {
				t.Fatal(err)
			}
			var order []string
			var at []time.Time
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(vap, vwc).WithInterceptorFuncs(interceptor.Funcs{
				Apply: func(_ context.Context, _ client.WithWatch, obj runtime.ApplyConfiguration, _ ...client.ApplyOption) error {
					switch obj.(type) {
					case *admissionregistrationv1ac.ValidatingWebhookConfigurationApplyConfiguration:
						order = append(order, "ValidatingWebhookConfiguration")
					case *admissionregistrationv1ac.ValidatingAdmissionPolicyApplyConfiguration:
						order = append(order, "ValidatingAdmissionPolicy")
					}
					at = append(at, time.Now())
					return nil
				},
			}).Build()
			const refresh = 300 * time.Millisecond
			r := &Reconciler{Client: c, ConfigName: "sandbox-fence", WebhookConfigName: "sandbox-fence-webhook", PolicyRefresh: refresh}
			if _, _, err := r.render(context.Background(), policyconfig.FromFenceConfig("sandbox-fence", tc.cfg)); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, order); diff != "" {
				t.Errorf("apply order (-want +got):\n%s", diff)
			}
			if tc.settles && len(at) == 2 && at[1].Sub(at[0]) < refresh {
				t.Errorf("the routing closed %v after the policies, before the API server's refresh of them (%v)", at[1].Sub(at[0]), refresh)
			}
		})
	}
}
