package framework

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// Verdict is what the apiserver answered to one write, in the terms the
// suite and the demo talk about.
type Verdict struct {
	Admitted bool
	// Code is the HTTP status of a refusal.
	Code int32
	// By is the denying ValidatingAdmissionPolicy or webhook, "" when the
	// refusal did not come from admission (RBAC, a failed test op, ...).
	By string
	// Message is the full Status message.
	Message string
	// Denial is the admission denial text after the policy or webhook
	// prefix: what the policy itself said.
	Denial string
	Err    error
}

// VerdictOf classifies the error of a write.
func VerdictOf(err error) Verdict {
	if err == nil {
		return Verdict{Admitted: true}
	}
	v := Verdict{Err: err, Message: err.Error()}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		v.Code = status.Status().Code
		v.Message = status.Status().Message
	}
	if d, ok := fence.ParseAdmissionDenial(v.Message); ok {
		v.By, v.Denial = d.Policy, d.Message
		if d.Webhook != "" {
			v.By = d.Webhook
		}
	}
	return v
}

func (v Verdict) String() string {
	switch {
	case v.Admitted:
		return "admitted"
	case v.By != "":
		return fmt.Sprintf("denied %d by %s: %s", v.Code, v.By, v.Denial)
	default:
		return fmt.Sprintf("refused %d (not by admission): %s", v.Code, v.Message)
	}
}

// DeniedBy reports whether the write was refused by admission with HTTP 422
// (never 403, which the host reads as missing RBAC), by a policy or
// webhook whose name contains by, with a message containing every want.
func (v Verdict) DeniedBy(by string, want ...string) error {
	if p := currentPeer(); p != nil {
		return v.deniedBy(p.Source(), want, false)
	}
	return v.deniedBy(by, want, true)
}

func (v Verdict) deniedBy(by string, want []string, want422 bool) error {
	if v.Admitted {
		return fmt.Errorf("admitted, want a denial by %s", by)
	}
	if v.By == "" || !strings.Contains(v.By, by) {
		return fmt.Errorf("want a denial by %s, got %s", by, v)
	}
	if want422 && v.Code != 422 {
		return fmt.Errorf("want HTTP 422, got %s", v)
	}
	for _, w := range want {
		if !strings.Contains(v.Message, w) {
			return fmt.Errorf("denial message lacks %q: %s", w, v.Message)
		}
	}
	return nil
}

// ExpectAdmitted fails t unless err is nil.
func ExpectAdmitted(t testing.TB, what string, err error) {
	t.Helper()
	if v := VerdictOf(err); !v.Admitted {
		t.Fatalf("%s: want admitted, got %s", what, v)
	}
}

// ExpectDenied fails t unless err is an admission denial by `by`.
func ExpectDenied(t testing.TB, what string, err error, by string, want ...string) {
	t.Helper()
	if p := currentPeer(); p != nil {
		peerDenial(t, p, what, VerdictOf(err), want)
		return
	}
	if e := VerdictOf(err).DeniedBy(by, want...); e != nil {
		t.Fatalf("%s: %v", what, e)
	}
}

// decreaseRE is the holder-epoch policy's message for a lowered epoch:
// the stored epoch and the one the write carried, both as the policy saw
// them at admission.
var decreaseRE = regexp.MustCompile(`holder-epoch: metadata\.annotations\[sandbox\.namzu\.ai/holder-epoch\]: epoch may not decrease from "([0-9]+)" to "([0-9]+)"`)

// EpochDecreaseDenial reports whether err is the holder-epoch policy's own
// "may not decrease" denial (HTTP 422 by ValidatingAdmissionPolicy
// sandbox-fence-holder-epoch), with the stored and the sent epoch it names.
// Reading them from the denial, not from a later GET, says what the server
// compared when it refused.
func EpochDecreaseDenial(err error) (stored, sent uint64, ok bool) {
	v := VerdictOf(err)
	if v.Admitted || v.By != PolicyHolderEpoch || v.Code != 422 {
		return 0, 0, false
	}
	m := decreaseRE.FindStringSubmatch(v.Denial)
	if m == nil {
		return 0, 0, false
	}
	s, err1 := strconv.ParseUint(m[1], 10, 64)
	n, err2 := strconv.ParseUint(m[2], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return s, n, true
}

// Warnings collects the admission warnings a client receives.
type Warnings struct {
	mu   sync.Mutex
	list []string
}

// HandleWarningHeader implements rest.WarningHandler.
func (w *Warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

// Take returns the warnings received since the last Take.
func (w *Warnings) Take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

// WithWarnings is id with clients that keep every admission warning they
// receive, for a test to read with Take.
func WithWarnings(id *Identity) (*Identity, *Warnings, error) {
	w := &Warnings{}
	cfg := rest.CopyConfig(id.Config)
	cfg.WarningHandler = w
	out, err := NewIdentity(id.Name, id.Username, id.Groups, cfg)
	return out, w, err
}

// Outcome is a write's verdict with the warnings the client received.
type Outcome struct {
	Verdict
	Warnings []string
}

// ViolationIn checks the outcome of a write that Deny mode refuses (by a
// policy or webhook whose name contains by, with every want in the
// message) against what the enforcement mode implies:
//   - deny: refused with 422 (DeniedBy);
//   - warn: admitted, with a warning carrying every want (and, from a
//     policy, the API server's "Validation failed for
//     ValidatingAdmissionPolicy '<by>'");
//   - audit: admitted, with no warning carrying them.
//
// It is the one place the suite says what a mode means, so each case is
// written once and run in every mode.
func (o Outcome) ViolationIn(mode, by string, want ...string) error {
	if mode == "deny" {
		return o.DeniedBy(by, want...)
	}
	if !o.Admitted {
		return fmt.Errorf("%s mode: want admitted, got %s", mode, o.Verdict)
	}
	carried := false
	for _, w := range o.Warnings {
		all := true
		for _, x := range want {
			all = all && strings.Contains(w, x)
		}
		if strings.HasPrefix(by, "sandbox-fence-") {
			all = all && strings.Contains(w, "ValidatingAdmissionPolicy '"+by+"'")
		}
		carried = carried || all
	}
	switch {
	case mode == "warn" && !carried:
		return fmt.Errorf("warn mode: admitted, but no warning carries %q from %s: %q", want, by, o.Warnings)
	case mode == "audit" && carried:
		return fmt.Errorf("audit mode: admitted, but the client was warned: %q", o.Warnings)
	}
	return nil
}

// AdmittedIn checks a write every mode admits: admitted, and no fence
// warning (the fence's warnings start with its rule families or name a
// sandbox-fence policy).
func (o Outcome) AdmittedIn(mode string) error {
	if !o.Admitted {
		return fmt.Errorf("%s mode: want admitted, got %s", mode, o.Verdict)
	}
	for _, w := range o.Warnings {
		if strings.Contains(w, "sandbox-fence-") || strings.Contains(w, "holder-epoch:") || strings.Contains(w, "cilium-fence:") {
			return fmt.Errorf("%s mode: admitted with a fence warning: %q", mode, w)
		}
	}
	return nil
}
