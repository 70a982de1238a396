package framework

import "context"

// WebhookProcess stops and starts the webhook: a process of the provider's
// own (local), or the shipped Deployment scaled to zero and back (kind). The
// outage case needs it: with the webhook gone, failurePolicy Fail must refuse
// exactly the writes routed to it and nothing else, and a restart alone must
// bring admission back. Providers that cannot (kubeconfig: a cluster the
// suite does not own) leave Env.WebhookProcess nil and the case skips with
// that reason.
type WebhookProcess interface {
	// Stop ends every webhook process (or pod) and returns once they have
	// exited.
	Stop(ctx context.Context) error
	// Start runs it again with the same configuration and returns once it
	// is ready (/readyz: listener up, informers synced).
	Start(ctx context.Context) error
}
