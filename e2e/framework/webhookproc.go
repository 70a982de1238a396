package framework

import "context"

// WebhookProcess stops and starts a webhook that the provider runs as a
// process of its own (the local provider). The outage case needs it: with the
// webhook gone, failurePolicy Fail must refuse exactly the writes routed to
// it and nothing else, and a restart alone must bring admission back.
// Providers that run the webhook as a Deployment leave Env.WebhookProcess nil
// and the case skips with that reason.
type WebhookProcess interface {
	// Stop ends the webhook process and returns once it has exited.
	Stop(ctx context.Context) error
	// Start runs it again with the same command line, certificate and port,
	// and returns once its /readyz answers (listener up, informers synced).
	Start(ctx context.Context) error
}
