// Package webhook adapts the rules of internal/admit to admission requests:
// it decides which requests a rule applies to, reads the FenceConfig, and
// turns field errors into 422 Invalid denials. It never mutates.
package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
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

// ConfigSource reads the FenceConfig the rules are driven by. Like
// CachedOwners and CachedNamespaces, the cache answers only what it cannot
// get wrong: a FenceConfig that binds the request's user there. The
// webhook configuration routed the request here, and the controller renders
// a change into the routing before the policies, which then admit a newly
// bound host's write unless this check runs; so a cached FenceConfig that
// does not bind the user is confirmed live before the write is skipped. A
// routed identity that is no host is rare (the shipped placeholder).
type ConfigSource struct {
	// Reader is the manager's cache.
	Reader client.Reader
	// Live reads straight from the API server (nil: the cache is trusted).
	Live client.Reader
	// Name is the FenceConfig's name (--config-name).
	Name string
}

// get returns the FenceConfig for a write of user in namespace: the cache's
// own copy, decoded once per change by the informer rather than deep-copied
// per request (the handler only reads it, and must never write to it), or
// the live one when the cached copy does not bind user there.
func (c ConfigSource) get(ctx context.Context, user, namespace string) (*fencev1alpha1.FenceConfig, error) {
	cfg, err := c.read(ctx, c.Reader, client.UnsafeDisableDeepCopy)
	if (err == nil || apierrors.IsNotFound(err)) && c.Live != nil && !mayBind(cfg, user, namespace) {
		return c.read(ctx, c.Live)
	}
	return cfg, err
}

func (c ConfigSource) read(ctx context.Context, r client.Reader, opts ...client.GetOption) (*fencev1alpha1.FenceConfig, error) {
	cfg := &fencev1alpha1.FenceConfig{}
	if err := r.Get(ctx, types.NamespacedName{Name: c.Name}, cfg, opts...); err != nil {
		return nil, err
	}
	return cfg, nil
}

// mayBind tells whether cfg binds user in namespace by its list, or may by
// its namespaceSelector (which CachedNamespaces confirms live).
func mayBind(cfg *fencev1alpha1.FenceConfig, user, namespace string) bool {
	if cfg == nil {
		return false
	}
	host := cfg.Spec.HostFor(user)
	return host != nil && (host.NamespaceSelector != nil || slices.Contains(host.Namespaces, namespace))
}

// CiliumHandler verifies the owner of a bound host's per-sandbox
// CiliumNetworkPolicy against the live cluster, which CEL cannot see
// (admit.ValidateCiliumOwner holds the checks). The webhook configuration
// routes the bound hosts' writes here, as the controller rendered them from
// the FenceConfig; a namespace that is not one of the host's is the egress
// policy's to judge.
type CiliumHandler struct {
	Config ConfigSource
	Owners admit.OwnerLookup
	// Namespaces reads the labels of a namespace a host may be bound in by
	// selector. Only a configuration with a namespaceSelector needs it.
	Namespaces *CachedNamespaces
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
	if req.Operation == admissionv1.Delete {
		// A configuration from before deletes were the policy's alone may
		// still route them here.
		h.Metrics.decision(RuleCiliumOwner, VerdictSkipped, req.Namespace)
		return admission.Allowed(admit.CiliumFamily.Message("deletes are judged by the ValidatingAdmissionPolicy"))
	}
	if !fencev1alpha1.VerifiableHost(req.UserInfo.Username) {
		h.Metrics.decision(RuleCiliumOwner, VerdictSkipped, req.Namespace)
		return admission.Allowed(admit.CiliumFamily.Message("not a ServiceAccount outside kube-system, so never a bound host"))
	}
	// One deadline for everything the request reads, so a cache that is
	// not synced yet cannot hold the API server's request until its own
	// timeout: the webhook answers first, with a message.
	lctx, cancel := context.WithTimeout(ctx, orDefault(h.LookupTimeout))
	defer cancel()
	cfg, err := h.Config.get(lctx, req.UserInfo.Username, req.Namespace)
	switch {
	case apierrors.IsNotFound(err):
		// The controller routes nobody here while the FenceConfig is
		// missing, and the egress policy refuses every ServiceAccount's
		// writes in opted-in namespaces meanwhile, so the write is not
		// let through unfenced.
		h.Metrics.decision(RuleCiliumOwner, VerdictSkipped, req.Namespace)
		return admission.Allowed(admit.CiliumFamily.Message("no FenceConfig: the egress policy refuses the write in opted-in namespaces"))
	case err != nil:
		log.Info("refusing for now: FenceConfig unreadable", "config", h.Config.Name, "err", err.Error())
		h.Metrics.decision(RuleCiliumOwner, VerdictError, req.Namespace)
		return unavailable(admit.CiliumFamily, cnpGK, req.Name, fmt.Sprintf(
			"FenceConfig %q could not be read (%v), so the write was not checked and is refused for now", h.Config.Name, err))
	}
	host := cfg.Spec.HostFor(req.UserInfo.Username)
	if host == nil {
		h.Metrics.decision(RuleCiliumOwner, VerdictSkipped, req.Namespace)
		return admission.Allowed(admit.CiliumFamily.Message("not a bound host"))
	}
	bound := slices.Contains(host.Namespaces, req.Namespace)
	if !bound && host.NamespaceSelector != nil {
		if h.Namespaces == nil {
			err = errors.New("the webhook reads no namespaces")
		} else {
			bound, err = h.Namespaces.Selects(lctx, host.NamespaceSelector, req.Namespace)
		}
		if err != nil {
			log.Info("refusing for now: namespace unread", "namespace", req.Namespace, "err", err.Error())
			h.Metrics.decision(RuleCiliumOwner, VerdictError, req.Namespace)
			return unavailable(admit.CiliumFamily, cnpGK, req.Name, fmt.Sprintf(
				"namespace %q could not be read (%v), so whether %s's namespaceSelector binds it is unknown and the write is refused for now",
				req.Namespace, err, req.UserInfo.Username))
		}
	}
	if !bound {
		h.Metrics.decision(RuleCiliumOwner, VerdictSkipped, req.Namespace)
		return admission.Allowed(admit.CiliumFamily.Message("not one of the host's namespaces: the egress policy judges the write"))
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
	if transient := internalErrors(errs); len(transient) > 0 {
		// The owner could not be read (a timeout, the API server
		// unreachable or overloaded): no verdict, so no 422, which a host
		// and kubectl read as final. 503 asks to retry.
		log.Info("refusing for now: owner unread", "errors", transient.ToAggregate().Error())
		h.Metrics.decision(RuleCiliumOwner, VerdictError, req.Namespace)
		return unavailable(admit.CiliumFamily, cnpGK, req.Name, transient.ToAggregate().Error())
	}
	if len(errs) > 0 {
		log.Info("denied", "errors", errs.ToAggregate().Error())
		h.Metrics.decision(RuleCiliumOwner, VerdictDenied, req.Namespace)
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

// internalErrors are the errors of errs that are no verdict: a lookup that
// got no answer (field.ErrorTypeInternal).
func internalErrors(errs field.ErrorList) field.ErrorList {
	return errs.Filter(func(err error) bool {
		var e *field.Error
		return !errors.As(err, &e) || e.Type != field.ErrorTypeInternal
	})
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

// denial is a 422 Invalid (never 403, which a host reads as missing RBAC)
// whose details.causes carry the field paths. The message
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

// RetryAfterSeconds is what an unavailable answer asks a client to wait.
const RetryAfterSeconds = 1

// unavailable answers a request the webhook could not check: what it needed
// to read (the FenceConfig, the owner) did not answer in time. That is no
// verdict on the write, so it is a 503 ServiceUnavailable with
// details.retryAfterSeconds, which apierrors.IsServiceUnavailable and
// SuggestsClientDelay recognise and pkg/fence retries (fence.IsTransient);
// a 422 would read as a final verdict on the write. 503 rather than 500: the
// API server's own answer when it cannot call a webhook is a 500
// InternalError too, but 503 also says that waiting helps, and names the
// cause the webhook knows.
func unavailable(family admit.Family, gk schema.GroupKind, name, why string) admission.Response {
	st := metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusServiceUnavailable,
		Reason:  metav1.StatusReasonServiceUnavailable,
		Message: family.Message(why + "; retry"),
		Details: &metav1.StatusDetails{Group: gk.Group, Kind: gk.Kind, Name: name, RetryAfterSeconds: RetryAfterSeconds},
	}
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &st}}
}
