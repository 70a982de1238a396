package framework

import "context"

// APIServerProcess restarts kube-apiserver when the provider runs it as a
// process of its own (the local provider). The start-up window case needs
// it: for up to 30 s after an API server starts, a policy whose paramKind
// it cannot map yet refuses what it matches (docs/install.md), and the
// fence must keep that from blocking anyone but bound hosts for good.
// Providers that cannot restart their API server leave
// Env.APIServerProcess nil and the case skips with that reason.
type APIServerProcess interface {
	// Restart stops kube-apiserver and starts it again with the same
	// command line, and returns once its /readyz answers.
	Restart(ctx context.Context) error
}
