// Package webhook adapts the rules of internal/admit to admission requests:
// it decides which requests a rule applies to, reads the FenceConfig, and
// turns field errors into 422 Invalid denials. It never mutates.
package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	kjson "sigs.k8s.io/json"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/internal/admit"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// CiliumEgressPath is the path the handler is served on.
const CiliumEgressPath = "/validate-cilium-egress"

// DefaultLookupTimeout bounds the owner lookups of one request; it is below
// the webhook's timeoutSeconds (5) so the webhook answers with its own clear
// message instead of the API server timing it out.
const DefaultLookupTimeout = 3 * time.Second

var cnpGK = fence.CiliumNetworkPolicyGVK.GroupKind()

// ConfigSource reads the FenceConfig the rules are driven by.
type ConfigSource struct {
	// Reader is the manager's cache.
	Reader client.Reader
	// Name is the FenceConfig's name (--config-name).
	Name string
}

func (c ConfigSource) get(ctx context.Context) (*fencev1alpha1.FenceConfig, error) {
	cfg := &fencev1alpha1.FenceConfig{}
	if err := c.Reader.Get(ctx, types.NamespacedName{Name: c.Name}, cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// mayBeHost mirrors the webhook configuration's matchConditions: a bound
// host is a ServiceAccount outside kube-system (contract §8.7, which the
// FenceConfig schema enforces), so no human user and no controller of the
// cluster (the garbage collector, the namespace controller) is ever refused
// by this webhook, even while the FenceConfig is missing.
func mayBeHost(username string) bool {
	return strings.HasPrefix(username, "system:serviceaccount:") &&
		!strings.HasPrefix(username, "system:serviceaccount:kube-system:")
}

// CiliumHandler verifies the owner of a bound host's per-sandbox
// CiliumNetworkPolicy (contract §4.4 items 1-3). It also holds the fail-closed
// duty while the FenceConfig is missing (contract §8.3): the policy then fences
// nobody, so the webhook refuses the writes and deletes of every identity
// that may be a host.
type CiliumHandler struct {
	Config ConfigSource
	Owners admit.OwnerLookup
	// LookupTimeout bounds the lookups of one request (DefaultLookupTimeout
	// when zero).
	LookupTimeout time.Duration
	Metrics       *Metrics
}

// Handle implements admission.Handler.
func (h *CiliumHandler) Handle(ctx context.Context, req admission.Request) admission.Response {
	log := logf.FromContext(ctx).WithValues("rule", RuleCiliumOwner)
	if req.Kind.Group != cnpGK.Group || req.Kind.Kind != cnpGK.Kind || req.SubResource != "" ||
		(req.Operation != admissionv1.Create && req.Operation != admissionv1.Update && req.Operation != admissionv1.Delete) {
		h.Metrics.decision(RuleCiliumOwner, VerdictSkipped, req.Namespace)
		return admission.Allowed(admit.CiliumFamily.Message("only CREATE, UPDATE and DELETE of CiliumNetworkPolicy are checked"))
	}
	if !mayBeHost(req.UserInfo.Username) {
		h.Metrics.decision(RuleCiliumOwner, VerdictSkipped, req.Namespace)
		return admission.Allowed(admit.CiliumFamily.Message("not a ServiceAccount outside kube-system, so never a bound host"))
	}
	// One deadline for everything the request reads, so a cache that is
	// not synced yet cannot hold the API server's request until its own
	// timeout: the webhook answers first, with a message.
	lctx, cancel := context.WithTimeout(ctx, orDefault(h.LookupTimeout))
	defer cancel()
	cfg, err := h.Config.get(lctx)
	if err != nil {
		// Without the configuration the webhook cannot tell a host from any
		// other ServiceAccount, and the policy (parameterNotFoundAction
		// Allow, so that no controller is blocked) fences nobody: the
		// webhook refuses rather than let a host through unchecked. Only
		// policy writes and deletes by ServiceAccounts outside kube-system
		// in fenced namespaces reach here.
		log.Info("refusing: FenceConfig unreadable", "config", h.Config.Name, "err", err.Error())
		h.Metrics.decision(RuleCiliumOwner, VerdictError, req.Namespace)
		return configDenial(admit.CiliumFamily, cnpGK, req.Name, h.Config.Name, err,
			"the webhook cannot tell bound hosts from other ServiceAccounts, so it refuses CiliumNetworkPolicy writes and deletes by ServiceAccounts outside kube-system in fenced namespaces until a cluster admin restores it (see docs/install.md)")
	}
	if req.Operation == admissionv1.Delete {
		// With the configuration read, the policy judges deletes (the name
		// prefix and the host's namespaces, contract §4.3 rule 1).
		h.Metrics.decision(RuleCiliumOwner, VerdictSkipped, req.Namespace)
		return admission.Allowed(admit.CiliumFamily.Message("deletes are judged by the ValidatingAdmissionPolicy"))
	}
	if cfg.Spec.HostFor(req.UserInfo.Username) == nil {
		h.Metrics.decision(RuleCiliumOwner, VerdictSkipped, req.Namespace)
		return admission.Allowed(admit.CiliumFamily.Message("not a bound host"))
	}
	obj, err := decodeOwnerReferences(req.Object.Raw)
	if err != nil {
		h.Metrics.decision(RuleCiliumOwner, VerdictDenied, req.Namespace)
		return denial(admit.CiliumFamily, cnpGK, req.Name, field.ErrorList{field.Invalid(field.NewPath("object"), nil,
			"the request's object is not a decodable CiliumNetworkPolicy: "+err.Error())}, nil)
	}
	// The request's namespace is authoritative: the owner must live there.
	obj.SetNamespace(req.Namespace)

	// The stored object is not decoded: the owner rule checks the new state
	// on its own (an UPDATE exactly like a CREATE), so old is always nil.
	errs, warnings := admit.ValidateCiliumOwner(lctx, &cfg.Spec, h.Owners, nil, obj)
	warnings = withFamily(admit.CiliumFamily, warnings)
	if len(errs) > 0 {
		verdict := verdictOf(errs)
		log.Info("denied", "errors", errs.ToAggregate().Error())
		h.Metrics.decision(RuleCiliumOwner, verdict, req.Namespace)
		return denial(admit.CiliumFamily, cnpGK, req.Name, errs, warnings)
	}
	h.Metrics.decision(RuleCiliumOwner, VerdictAllowed, req.Namespace)
	if len(warnings) > 0 {
		log.Info("admitted with warnings", "warnings", warnings)
	}
	return admission.Allowed("").WithWarnings(warnings...)
}

func orDefault(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultLookupTimeout
	}
	return d
}

func verdictOf(errs field.ErrorList) string {
	for _, e := range errs {
		if e.Type == field.ErrorTypeInternal {
			return VerdictError
		}
	}
	return VerdictDenied
}

// decodeObject decodes a raw admission object; an empty or non-object body
// is an error rather than an empty object, so it is never mistaken for one.
func decodeObject(raw []byte) (*unstructured.Unstructured, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("the object is empty")
	}
	m := map[string]any{}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// decodeOwnerReferences decodes only what the owner rule reads,
// metadata.ownerReferences, into an object with nothing else: the rest of
// the body (the egress rules, managedFields) is scanned but never built into
// maps, which was most of the webhook's decoding cost. Keys are matched
// exactly, as the map decoding of decodeObject does (a struct would also
// accept "Metadata", a second metadata the API server ignores), and the
// references are decoded generically so malformed ones read exactly as
// before through Unstructured.GetOwnerReferences. A body that is not a JSON
// object gets decodeObject's error, word for word.
func decodeOwnerReferences(raw []byte) (*unstructured.Unstructured, error) {
	// Structs with raw fields, decoded case-sensitively: a key matches only
	// as spelt (as the map decoding matched), a repeated key replaces the
	// earlier one (as in a map), and nothing but metadata and then
	// ownerReferences is copied out of the body.
	var top struct {
		Metadata json.RawMessage `json:"metadata"`
	}
	if len(raw) == 0 || kjson.UnmarshalCaseSensitivePreserveInts(raw, &top) != nil {
		return decodeObject(raw)
	}
	obj := &unstructured.Unstructured{Object: map[string]any{}}
	var meta struct {
		OwnerReferences json.RawMessage `json:"ownerReferences"`
	}
	if top.Metadata == nil || kjson.UnmarshalCaseSensitivePreserveInts(top.Metadata, &meta) != nil {
		// Absent or not an object: no owner references, as GetOwnerReferences
		// reads a metadata that is not a map.
		return obj, nil
	}
	metadata := map[string]any{}
	obj.Object["metadata"] = metadata
	if meta.OwnerReferences != nil {
		var refs any
		if err := json.Unmarshal(meta.OwnerReferences, &refs); err != nil {
			return decodeObject(raw)
		}
		metadata["ownerReferences"] = refs
	}
	return obj, nil
}

// denial is a 422 Invalid (contract §8.1: never 403, which a host reads as
// missing RBAC) whose details.causes carry the field paths. The message
// starts with the rule family, and so does every cause: for a 422 with
// causes kubectl prints only `The <kind> "<name>" is invalid: <field>:
// <cause>` and drops the message, so each cause says itself which family
// refused the request and that it was a denial.
func denial(family admit.Family, gk schema.GroupKind, name string, errs field.ErrorList, warnings []string) admission.Response {
	st := apierrors.NewInvalid(gk, name, errs).Status()
	st.Message = family.Message(st.Message)
	for i := range st.Details.Causes {
		st.Details.Causes[i].Message = deniedPrefix(family) + st.Details.Causes[i].Message
	}
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &st, Warnings: warnings}}
}

// withFamily opens each of a validator's warnings with the rule family, as
// denial does for its message: the one layer that names the family.
func withFamily(family admit.Family, warnings []string) []string {
	var out []string
	for _, w := range warnings {
		out = append(out, family.Message(w))
	}
	return out
}

// deniedPrefix opens the message of every cause of a denial.
func deniedPrefix(family admit.Family) string {
	return family.Message("denied by the sandbox-fence webhook: ")
}

// configDenial answers a request the webhook could not check because its
// FenceConfig was unavailable. Absent is a state a cluster admin must fix: a
// 422 that says so. Unreadable (the cache not synced yet, or stopped while
// the process shuts down) is transient: a 500, which a host retries like any
// webhook outage, where a 422 would read as a final verdict on its write.
func configDenial(family admit.Family, gk schema.GroupKind, name, configName string, err error, whenMissing string) admission.Response {
	if !apierrors.IsNotFound(err) {
		st := metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    http.StatusInternalServerError,
			Reason:  metav1.StatusReasonInternalError,
			Message: family.Message(fmt.Sprintf("FenceConfig %q could not be read (%v), so the write was not checked and is refused for now; retry", configName, err)),
			Details: &metav1.StatusDetails{Group: gk.Group, Kind: gk.Kind, Name: name},
		}
		return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &st}}
	}
	msg := fmt.Sprintf("FenceConfig %q not found; %s", configName, whenMissing)
	st := metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusUnprocessableEntity,
		Reason:  metav1.StatusReasonInvalid,
		Message: family.Message(msg),
		// A 422 with a kind and a name but no cause prints in kubectl as
		// `The <kind> "<name>" is invalid` and nothing else: the cause
		// carries the reason.
		Details: &metav1.StatusDetails{Group: gk.Group, Kind: gk.Kind, Name: name, Causes: []metav1.StatusCause{{
			Type: metav1.CauseTypeFieldValueNotFound, Message: deniedPrefix(family) + msg,
		}}},
	}
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &st}}
}
