package framework

import "context"

// APIServerProcess restarts kube-apiserver: the local provider's process,
// or the static pod on kind's control-plane node. The restart case needs it
// (TestAPIServerRestartsUnderFencedLoad): across restarts, valid writes are
// admitted or answered with something a client retries, never refused with
// a verdict. Providers that cannot restart their API server leave
// Env.APIServerProcess nil and the case skips with that reason.
type APIServerProcess interface {
	// Restart stops kube-apiserver and starts it again with the same
	// command line (a new process, not the old one still draining), and
	// returns once its /readyz answers.
	Restart(ctx context.Context) error
}
