package framework

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
)

// A lookup that fails says nothing of what is installed. In CI a case whose
// context had run out called Markers while the API server restarted; the
// failed lookups reset Policies, and two later holder-epoch cases skipped
// as "not installed" (hack/testreport failed the run on those skips).
func TestMarkersKeepsWhatIsInstalledWhenALookupFails(t *testing.T) {
	dc := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{VAPGVR: "ValidatingAdmissionPolicyList"})
	dc.PrependReactor("get", "validatingadmissionpolicies", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewTimeoutError("the API server is starting", 1)
	})
	before := map[string]bool{PolicyHolderEpoch: true, PolicyHolderEpochRepair: true, PolicyCiliumEgress: true, PolicyCiliumOwner: true, PolicyStrictDelete: true}
	e := &Env{Admin: &Identity{Dynamic: dc}, Policies: map[string]bool{}}
	for k, v := range before {
		e.Policies[k] = v
	}
	if _, err := e.Markers(context.Background()); err == nil {
		t.Fatal("Markers: want the lookup's error, got none")
	}
	if diff := cmp.Diff(before, e.Policies); diff != "" {
		t.Errorf("Policies after a failed lookup (-before +after):\n%s", diff)
	}
}
