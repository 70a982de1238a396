package webhook

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// Prerequisite is an API the webhook needs the API server to serve, and who
// installs it.
type Prerequisite struct {
	GVR schema.GroupVersionResource
	// From says what installs it, for the message of a missing one.
	From string
}

func (p Prerequisite) String() string {
	return fmt.Sprintf("%s (%s/%s, from %s)", p.GVR.GroupResource(), p.GVR.GroupVersion(), p.GVR.Resource, p.From)
}

// Prerequisites are the APIs the webhook reads or guards. Without the owner
// kinds its informers cannot start (issue 15: it used to exit and
// crashloop behind a fail-closed webhook); without the CiliumNetworkPolicy
// CRD there is nothing to guard and the API server could not route a write
// to it; without the FenceConfig CRD it cannot read its configuration. The
// webhook stays up and not ready while any is missing (docs/install.md,
// Prerequisites).
var Prerequisites = []Prerequisite{
	{GVR: fence.SandboxGVR, From: "the agent-sandbox CRDs"},
	{GVR: fence.SandboxClaimGVR, From: "the agent-sandbox extensions CRDs"},
	{GVR: fence.CiliumNetworkPolicyGVR, From: "Cilium"},
	{GVR: fencev1alpha1.GroupVersionResource, From: "sandbox-fence config/crd"},
}

// MissingPrerequisites returns the prerequisites the server does not serve,
// in the order given. An error is a discovery failure other than "group
// version not served": then nothing can be said about what is missing.
func MissingPrerequisites(dc discovery.ServerResourcesInterface, reqs []Prerequisite) ([]Prerequisite, error) {
	served := map[schema.GroupVersion]map[string]bool{}
	var missing []Prerequisite
	for _, p := range reqs {
		gv := p.GVR.GroupVersion()
		names, ok := served[gv]
		if !ok {
			list, err := dc.ServerResourcesForGroupVersion(gv.String())
			switch {
			case apierrors.IsNotFound(err):
				names = map[string]bool{}
			case err != nil:
				return nil, fmt.Errorf("discovering %s: %w", gv, err)
			default:
				names = map[string]bool{}
				for _, r := range list.APIResources {
					names[r.Name] = true
				}
			}
			served[gv] = names
		}
		if !names[p.GVR.Resource] {
			missing = append(missing, p)
		}
	}
	return missing, nil
}

// PrerequisitesError is the readiness failure that names what is missing
// and what to do.
func PrerequisitesError(missing []Prerequisite) error {
	if len(missing) == 0 {
		return nil
	}
	names := make([]string, len(missing))
	for i, p := range missing {
		names[i] = p.String()
	}
	return fmt.Errorf("prerequisites missing: the API server serves no %s; install them (docs/install.md, Prerequisites): the webhook becomes ready by itself once they are served", strings.Join(names, ", no "))
}

// PrerequisiteState is what the last discovery found, for the readiness
// check. The zero value is "not checked yet" (not ready).
type PrerequisiteState struct {
	mu      sync.Mutex
	checked bool
	err     error
}

// Set records the outcome of one check: err is a discovery failure or
// PrerequisitesError's.
func (s *PrerequisiteState) Set(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checked, s.err = true, err
}

// Err is the readiness verdict: nil once every prerequisite was found.
func (s *PrerequisiteState) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.checked {
		return errors.New("prerequisites not checked yet")
	}
	return s.err
}
