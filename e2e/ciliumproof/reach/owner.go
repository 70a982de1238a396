package main

import (
	"github.com/cilium/cilium/pkg/endpoint/regeneration"
	"github.com/cilium/cilium/pkg/policy"
	"github.com/cilium/cilium/pkg/u8proto"
)

// owner is the endpoint an endpoint policy is distilled for, as little of
// one as the repository asks for (what policy.LookupFlow's endpointInfo
// gives it): no named ports, never the host, never regenerated.
type owner struct{ id uint64 }

var _ policy.PolicyOwner = owner{}

func (o owner) GetID() uint64                                      { return o.id }
func (o owner) GetIngressNamedPort(string, u8proto.U8proto) uint16 { return 0 }
func (o owner) PolicyDebug(string, ...any)                         {}
func (o owner) IsHost() bool                                       { return false }
func (o owner) PreviousMapStateSizes() policy.MapStateSizes        { return policy.MapStateSizes{} }
func (o owner) RegenerateIfAlive(*regeneration.ExternalRegenerationMetadata) <-chan bool {
	done := make(chan bool)
	close(done)
	return done
}
