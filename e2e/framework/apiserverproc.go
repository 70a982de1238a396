package framework

import "context"

// APIServerProcess restarts kube-apiserver: the local provider's process,
// or the static pod on kind's control-plane node. The start-up window case needs
// it: for up to 30 s after an API server starts, a policy whose paramKind
// it cannot map yet refuses what it matches (docs/install.md), and the
// fence must keep that from blocking anyone but bound hosts for good.
// Providers that cannot restart their API server leave
// Env.APIServerProcess nil and the case skips with that reason.
type APIServerProcess interface {
	// Restart stops kube-apiserver and starts it again with the same
	// command line (a new process, not the old one still draining), and
	// returns once its /readyz answers.
	Restart(ctx context.Context) error
}
