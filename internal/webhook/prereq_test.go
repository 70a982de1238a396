package webhook_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/sandbox-fence/sandbox-fence/internal/webhook"
)

// served builds a fake discovery client serving the resources of every
// prerequisite whose index is not in without.
func served(without ...int) *fakediscovery.FakeDiscovery {
	skip := map[int]bool{}
	for _, i := range without {
		skip[i] = true
	}
	byGV := map[string]*metav1.APIResourceList{}
	var order []string
	for i, p := range webhook.Prerequisites {
		gv := p.GVR.GroupVersion().String()
		l, ok := byGV[gv]
		if !ok {
			l = &metav1.APIResourceList{GroupVersion: gv}
			byGV[gv] = l
			order = append(order, gv)
		}
		if !skip[i] {
			l.APIResources = append(l.APIResources, metav1.APIResource{Name: p.GVR.Resource})
		}
	}
	d := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}
	for _, gv := range order {
		// A group version with no resource left is not served at all (its
		// CRD is the only one of the group): discovery answers 404.
		if len(byGV[gv].APIResources) > 0 {
			d.Resources = append(d.Resources, byGV[gv])
		}
	}
	return d
}

func TestMissingPrerequisites(t *testing.T) {
	p := webhook.Prerequisites
	tests := []struct {
		name    string
		without []int
		want    []webhook.Prerequisite
	}{
		{name: "everything served", want: nil},
		{name: "the Cilium CRD missing", without: []int{2}, want: []webhook.Prerequisite{p[2]}},
		{name: "the agent-sandbox CRDs missing", without: []int{0, 1}, want: []webhook.Prerequisite{p[0], p[1]}},
		{name: "nothing served", without: []int{0, 1, 2, 3}, want: p},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := webhook.MissingPrerequisites(served(tt.without...), webhook.Prerequisites)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("missing (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAResourceMissingFromAServedGroupIsMissing: a group version can be
// served by another CRD of the same group while ours is absent.
func TestAResourceMissingFromAServedGroupIsMissing(t *testing.T) {
	d := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}
	d.Resources = []*metav1.APIResourceList{{GroupVersion: "cilium.io/v2", APIResources: []metav1.APIResource{{Name: "ciliumendpoints"}}}}
	got, err := webhook.MissingPrerequisites(d, webhook.Prerequisites[2:3])
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].GVR.Resource != "ciliumnetworkpolicies" {
		t.Errorf("got %v, want ciliumnetworkpolicies missing", got)
	}
}

// TestTheReadinessMessageNamesWhatIsMissing: the message an admin sees on
// /readyz/prerequisites and in the Event names the group, version and
// resource of each missing API, and where to read on.
func TestTheReadinessMessageNamesWhatIsMissing(t *testing.T) {
	missing, err := webhook.MissingPrerequisites(served(1, 2), webhook.Prerequisites)
	if err != nil {
		t.Fatal(err)
	}
	msg := webhook.PrerequisitesError(missing).Error()
	for _, want := range []string{
		"sandboxclaims.extensions.agents.x-k8s.io (extensions.agents.x-k8s.io/v1beta1/sandboxclaims",
		"ciliumnetworkpolicies.cilium.io (cilium.io/v2/ciliumnetworkpolicies, from Cilium)",
		"docs/install.md, Prerequisites",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	for _, served := range []string{"sandboxes.agents.x-k8s.io", "fenceconfigs"} {
		if strings.Contains(msg, served) {
			t.Errorf("message %q names %s, which is served", msg, served)
		}
	}
	if webhook.PrerequisitesError(nil) != nil {
		t.Error("nothing missing must be no error")
	}
}

// TestPrerequisiteStateIsNotReadyUntilChecked: before the first discovery
// the webhook must not report ready, and after a failure it reports that
// failure until a check finds everything.
func TestPrerequisiteStateIsNotReadyUntilChecked(t *testing.T) {
	var s webhook.PrerequisiteState
	if s.Err() == nil {
		t.Fatal("ready before any check")
	}
	missing := errors.New("prerequisites missing: x")
	s.Set(missing)
	if !errors.Is(s.Err(), missing) {
		t.Fatalf("Err() = %v, want %v", s.Err(), missing)
	}
	s.Set(nil)
	if s.Err() != nil {
		t.Fatalf("Err() = %v after everything was found", s.Err())
	}
}

// TestDiscoveryErrorsAreNotReadAsMissing: a failing discovery call is an
// error, not a verdict that the CRD is absent.
func TestDiscoveryErrorsAreNotReadAsMissing(t *testing.T) {
	d := served()
	_, err := webhook.MissingPrerequisites(failingDiscovery{d}, webhook.Prerequisites)
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("err = %v, want the discovery failure", err)
	}
}

type failingDiscovery struct{ *fakediscovery.FakeDiscovery }

func (failingDiscovery) ServerResourcesForGroupVersion(string) (*metav1.APIResourceList, error) {
	return nil, errors.New("connection refused")
}
