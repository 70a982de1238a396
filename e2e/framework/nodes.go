package framework

import "context"

// Nodes stops and starts a cluster's nodes outright, as a power loss would:
// the node-loss case needs it. Only a provider that owns its nodes can (kind:
// each node is a container); others leave Env.Nodes nil and the case skips
// with that reason.
type Nodes interface {
	// Stop kills the node's container (no graceful shutdown) and returns
	// once it is no longer running.
	Stop(ctx context.Context, node string) error
	// Start runs the node again and returns once its kubelet reports Ready
	// (with the pod network set up again where the provider owns it).
	Start(ctx context.Context, node string) error
}
