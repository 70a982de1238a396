//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

// The controller manager type-checks every policy against the installed CRD
// schemas and reports it in status.typeChecking. A warning there means an
// expression reads a field the schema does not have, which CEL then treats as
// absent at run time: a rule that silently never fires.
func TestShippedPoliciesTypeCheckAgainstTheInstalledSchemas(t *testing.T) {
	requireShipped(t)
	policies := []string{framework.PolicyHolderEpoch, framework.PolicyHolderEpochRepair, framework.PolicyCiliumEgress}
	for _, p := range policies {
		t.Run(p, func(t *testing.T) {
			requirePolicy(t, p)
			ctx := testContext(t)
			var got *admissionv1.ValidatingAdmissionPolicy
			err := framework.Eventually(ctx, 2*time.Minute, 250*time.Millisecond, "status of "+p, func(ctx context.Context) (bool, string, error) {
				var err error
				got, err = env.Admin.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, p, metav1.GetOptions{})
				if err != nil {
					return false, "", err
				}
				done := got.Status.ObservedGeneration == got.Generation && got.Status.TypeChecking != nil
				return done, fmt.Sprintf("observedGeneration %d of %d", got.Status.ObservedGeneration, got.Generation), nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff([]admissionv1.ExpressionWarning(nil), got.Status.TypeChecking.ExpressionWarnings); d != "" {
				t.Errorf("type-checking warnings (-want +got):\n%s", d)
			}
		})
	}
}
