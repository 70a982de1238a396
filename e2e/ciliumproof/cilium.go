package ciliumproof

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/cilium/cilium/pkg/defaults"
	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	"github.com/cilium/cilium/pkg/policy/api"
	"github.com/cilium/cilium/pkg/policy/types"
	policyutils "github.com/cilium/cilium/pkg/policy/utils"
	kjson "sigs.k8s.io/json"
)

// ClusterName is the cluster name the agent passes to Parse with its
// defaults: cluster-name "default" and policy-default-local-cluster true
// (cmtypes.LocalClusterNameForPolicies). Parse adds it to every toEndpoints
// selector that names no cluster.
const ClusterName = defaults.ClusterName

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// initEntities does what the agent does once at start: the entity
// "cluster" selects, besides the reserved identities, the pods of the
// agent's own cluster (api.InitEntities with its cluster-name). Without it
// fromEntities: [cluster] would select no pod.
var initEntities = sync.OnceFunc(func() { api.InitEntities(ClusterName) })

// Parsed is a body as the Cilium agent reads it: the rules of
// CiliumNetworkPolicy.Parse (which runs Rule.Sanitize on each spec) and the
// policy entries the agent hands its policy repository
// (policyutils.RulesToPolicyEntries).
type Parsed struct {
	Rules   api.Rules
	Entries types.PolicyEntries
}

// Parse decodes a body as the agent's informer does (case-sensitive JSON
// into the typed CiliumNetworkPolicy; unknown fields are dropped, as the
// API server's pruning drops them) and parses it with Cilium's own code,
// under the agent's default option.Config (enable-l7-proxy true, so DNS
// rules are accepted).
func Parse(body map[string]any) (*Parsed, error) {
	initEntities()
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	cnp := &ciliumv2.CiliumNetworkPolicy{}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, cnp); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	rules, err := cnp.Parse(quiet, ClusterName)
	if err != nil {
		return nil, err
	}
	return &Parsed{Rules: rules, Entries: policyutils.RulesToPolicyEntries(rules)}, nil
}
