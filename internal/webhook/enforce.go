package webhook

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/sandbox-fence/sandbox-fence/internal/enforcement"
)

// ViolationAnnotation is the key of the audit annotation every refusal
// carries; the API server prefixes it with the webhook's name
// ("cilium-egress.fence.sandbox.namzu.ai/violation").
const ViolationAnnotation = "violation"

// Event reasons, one per enforcement mode.
const (
	ReasonDenied  = "FenceDenied"
	ReasonWarned  = "FenceWarned"
	ReasonAudited = "FenceAudited"
)

// maxEventMessage keeps an Event's message well inside what the API server
// stores: the denial names the field and value, never a whole object.
const maxEventMessage = 1024

// Enforce applies the enforcement mode to a handler's verdicts (contract
// §9.1). Every refusal of the handler, whatever the mode, gets the audit
// annotation ViolationAnnotation with its message and records a Warning
// Event on the object in the request's namespace. In Deny mode the refusal
// stands; in Warn mode the write is admitted with the refusal's message as
// an admission warning; in Audit mode it is admitted silently. The
// handler's metrics count the violation as "denied" (or "error") in every
// mode, so the numbers of a Warn rollout read as what Deny would refuse.
type Enforce struct {
	Handler admission.Handler
	Mode    enforcement.Mode
	// Recorder records the Events; nil records none.
	Recorder record.EventRecorder
	// Kind and APIVersion name the object the Events are about.
	Kind, APIVersion string
}

// Handle implements admission.Handler.
func (e *Enforce) Handle(ctx context.Context, req admission.Request) admission.Response {
	resp := e.Handler.Handle(ctx, req)
	if resp.Allowed {
		return resp
	}
	msg := ""
	if resp.Result != nil {
		msg = resp.Result.Message
	}
	if resp.AuditAnnotations == nil {
		resp.AuditAnnotations = map[string]string{}
	}
	resp.AuditAnnotations[ViolationAnnotation] = msg
	e.record(req, msg)
	switch e.Mode {
	case enforcement.Warn:
		return admitted(resp, append(resp.Warnings, msg))
	case enforcement.Audit:
		return admitted(resp, resp.Warnings)
	}
	return resp
}

// admitted turns a refusal into an admission that keeps its audit
// annotations and the given warnings.
func admitted(refused admission.Response, warnings []string) admission.Response {
	out := admission.Allowed("")
	out.AuditAnnotations = refused.AuditAnnotations
	out.Warnings = warnings
	return out
}

func (e *Enforce) record(req admission.Request, msg string) {
	if e.Recorder == nil {
		return
	}
	reason, verb := ReasonDenied, "refused"
	switch e.Mode {
	case enforcement.Warn:
		reason, verb = ReasonWarned, "admitted with a warning; Deny mode would refuse it"
	case enforcement.Audit:
		reason, verb = ReasonAudited, "admitted (audit mode); Deny mode would refuse it"
	}
	note := fmt.Sprintf("%s by %s %s: %s", req.Operation, req.UserInfo.Username, verb, msg)
	if len(note) > maxEventMessage {
		note = note[:maxEventMessage-3] + "..."
	}
	ref := &corev1.ObjectReference{APIVersion: e.APIVersion, Kind: e.Kind, Namespace: req.Namespace, Name: req.Name}
	e.Recorder.Event(ref, corev1.EventTypeWarning, reason, note)
}
