package fence

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// Sentinels for errors.Is. The typed errors below match them too, so a caller
// may branch with errors.Is and read details with errors.As.
var (
	// ErrStaleEpoch: the stored epoch is greater than the one held; another
	// process holds the workspace now. Matched by *StaleEpochError.
	ErrStaleEpoch = errors.New("stale holder epoch")
	// ErrUnreadableEpoch: the stored epoch is malformed and cannot be compared.
	// Matched by *UnreadableEpochError.
	ErrUnreadableEpoch = errors.New("unreadable holder epoch")
	// ErrPatchNotApplied: the API server answered 422 Invalid without an
	// admission message (a denial with one is an *AdmissionDeniedError), or
	// the write was refused locally. Suspend, Resume, Stamp and
	// RefreshTemplate, whose fenced PATCH a failed test clause answers with
	// 422, re-read the Sandbox first and return it when nothing the patch
	// tested moved since its read (a retry would fail the same way), or
	// when it moved before each of three attempts (a moved epoch above the
	// held one is ErrStaleEpoch instead). RefreshTemplate also returns it,
	// sending nothing, when the Sandbox as read is not Suspended. Every
	// other method (CreateWorkspace, ApplyEgress, Delete, DeleteClaim,
	// RemoveEgress) returns the first such 422 unretried: there it is the
	// object itself refused, by its CRD schema, say.
	ErrPatchNotApplied = errors.New("patch not applied")
	// ErrConflict: the API server answered 409, Conflict or AlreadyExists.
	// Delete and DeleteClaim with an epoch send a resourceVersion
	// precondition; on a Conflict they re-read, re-check and retry, and
	// wrap the third Conflict in a row. ApplyEgress answers AlreadyExists on
	// its create with a merge PATCH of the same body, so it returns
	// ErrConflict only for a 409 that PATCH gets. Every other 409 is
	// returned as received, unretried: AlreadyExists from CreateWorkspace,
	// a Conflict on a PATCH (which carries no resourceVersion, so the API
	// server has already retried its own conflicts) or on a DELETE without
	// an epoch.
	ErrConflict = errors.New("conflict")
	// ErrGone: the object does not exist (404 or 410).
	ErrGone = errors.New("object gone")
	// ErrFenceNotInstalled: the egress fence's policy or binding is missing or
	// unreadable, so per-sandbox egress must not be written.
	ErrFenceNotInstalled = errors.New("egress fence not installed")
	// ErrReadBackMismatch: the stored policy differs from what was written;
	// admission never mutates, so something rewrote it.
	ErrReadBackMismatch = errors.New("read-back differs from the written policy")
)

// StaleEpochError says another process raised the epoch past ours.
type StaleEpochError struct {
	Object string
	Stored uint64
	Held   uint64
}

// Error says which host must stop and why.
func (e *StaleEpochError) Error() string {
	return fmt.Sprintf("%s: stored holder epoch %d is greater than the held epoch %d; another host owns this workspace now, re-acquire it before writing", e.Object, e.Stored, e.Held)
}

// Is makes errors.Is(err, ErrStaleEpoch) true.
func (e *StaleEpochError) Is(target error) bool { return target == ErrStaleEpoch }

// UnreadableEpochError carries a malformed stored epoch.
type UnreadableEpochError struct {
	Object string
	Value  string
	Err    error
}

// Error names the malformed value and who can repair it.
func (e *UnreadableEpochError) Error() string {
	return fmt.Sprintf("%s: stored holder epoch %q is malformed (%v); only a break-glass identity may repair it", e.Object, e.Value, e.Err)
}

// Is makes errors.Is(err, ErrUnreadableEpoch) true.
func (e *UnreadableEpochError) Is(target error) bool { return target == ErrUnreadableEpoch }

// Unwrap returns the parse error.
func (e *UnreadableEpochError) Unwrap() error { return e.Err }

// AdmissionDeniedError is a denial by a ValidatingAdmissionPolicy or by an
// admission webhook, parsed from Status.message. Exactly one of
// Policy (with Binding) or Webhook is set.
type AdmissionDeniedError struct {
	// Code is the HTTP status (422 for every sandbox-fence denial).
	Code    int32
	Policy  string
	Binding string
	Webhook string
	// Message is the denial text after the admission prefix.
	Message string
	// Err is the API error as the client received it.
	Err error
}

// Error names the denying policy or webhook and its message.
func (e *AdmissionDeniedError) Error() string {
	if e.Webhook != "" {
		return fmt.Sprintf("denied by admission webhook %q: %s", e.Webhook, e.Message)
	}
	return fmt.Sprintf("denied by ValidatingAdmissionPolicy %q (binding %q): %s", e.Policy, e.Binding, e.Message)
}

// Unwrap returns the API error.
func (e *AdmissionDeniedError) Unwrap() error { return e.Err }

// The exact prefixes the apiserver writes. The message may be
// wrapped (e.g. `Sandbox "a" is invalid: ...`), so they are searched, not
// anchored.
var (
	vapDenialRE     = regexp.MustCompile(`ValidatingAdmissionPolicy '([^']*)' with binding '([^']*)' denied request: (?s)(.*)$`)
	webhookDenialRE = regexp.MustCompile(`admission webhook "([^"]*)" denied the request: (?s)(.*)$`)
)

// ParseAdmissionDenial recognises an admission denial in a Status message;
// ok is false for any other message (such as a failed test op).
func ParseAdmissionDenial(message string) (denial AdmissionDeniedError, ok bool) {
	if m := vapDenialRE.FindStringSubmatch(message); m != nil {
		return AdmissionDeniedError{Policy: m[1], Binding: m[2], Message: m[3]}, true
	}
	if m := webhookDenialRE.FindStringSubmatch(message); m != nil {
		return AdmissionDeniedError{Webhook: m[1], Message: m[2]}, true
	}
	return AdmissionDeniedError{}, false
}

// IsTransient reports whether err is an answer that is no verdict on the
// request, so the same request may succeed later: the API server or the
// fence's webhook could not decide it now (429, 500 such as the API
// server's "failed calling webhook", 503 such as the webhook's owner read
// that got no answer, 504 and the API server's timeouts),
// or the request got no answer at all (the connection refused, reset or
// cut). Every other error is final: a denial (422), a conflict (409), a
// credential problem (401, 403), a missing object (404, 410). The Client
// retries transient answers itself (Options.Retry); a caller that gets
// one back ran out of attempts or of its context's time.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	var denied *AdmissionDeniedError
	if errors.As(err, &denied) {
		return transientCode(denied.Code)
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return transientCode(status.Status().Code) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err)
	}
	return utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) ||
		utilnet.IsHTTP2ConnectionLost(err)
}

func transientCode(code int32) bool {
	switch code {
	case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}
