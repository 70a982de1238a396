package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/internal/admit"
	tst "github.com/sandbox-fence/sandbox-fence/internal/testing"
	"github.com/sandbox-fence/sandbox-fence/internal/webhook"
)

// verdict is the part of a response a client sees.
type verdict struct {
	Allowed  bool
	Code     int32
	Reason   metav1.StatusReason
	Message  string
	Causes   []metav1.StatusCause
	Warnings []string
	Patch    bool
}

func verdictOf(r admission.Response) verdict {
	v := verdict{Allowed: r.Allowed, Warnings: r.Warnings, Patch: len(r.Patches) > 0 || r.Patch != nil}
	if r.Result != nil && !r.Allowed {
		v.Code, v.Reason, v.Message = r.Result.Code, r.Result.Reason, r.Result.Message
		if r.Result.Details != nil {
			v.Causes = r.Result.Details.Causes
		}
	}
	return v
}

func scheme(t testing.TB) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := fencev1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	for _, gvk := range []struct{ kind, list string }{{"SandboxClaim", "SandboxClaimList"}, {"Sandbox", "SandboxList"}} {
		gv := tst.ClaimGVK.GroupVersion()
		if gvk.kind == "Sandbox" {
			gv = tst.SandboxGVK.GroupVersion()
		}
		s.AddKnownTypeWithName(gv.WithKind(gvk.kind), &unstructured.Unstructured{})
		s.AddKnownTypeWithName(gv.WithKind(gvk.list), &unstructured.UnstructuredList{})
	}
	return s
}

func fakeReader(t testing.TB, objs ...client.Object) client.Client {
	t.Helper()
	b := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(objs...)
	// The index cmd/webhook registers: without it a List by pod label fails.
	for _, k := range admit.OwnerKinds {
		owner := &unstructured.Unstructured{}
		owner.SetGroupVersionKind(k.GVK)
		b = b.WithIndex(owner, webhook.PodLabelIndex, webhook.IndexPodLabels(k))
	}
	return b.Build()
}

// countingReader counts Gets, to tell a cache answer from a live one.
type countingReader struct {
	client.Reader
	gets int
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.gets++
	return c.Reader.Get(ctx, key, obj, opts...)
}

// blockingReader answers only when the caller's deadline expires, like an
// API server that does not answer.
type blockingReader struct{ client.Reader }

func (blockingReader) Get(ctx context.Context, _ client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
	<-ctx.Done()
	return ctx.Err()
}

func raw(t testing.TB, obj any) runtime.RawExtension {
	t.Helper()
	if obj == nil {
		return runtime.RawExtension{}
	}
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return runtime.RawExtension{Raw: b}
}

func cnpRequest(t testing.TB, op admissionv1.Operation, user string, old, obj *unstructured.Unstructured) admission.Request {
	t.Helper()
	name := ""
	if obj != nil {
		name = obj.GetName()
	} else if old != nil {
		name = old.GetName()
	}
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:       "req-1",
		Kind:      metav1.GroupVersionKind{Group: "cilium.io", Version: "v2", Kind: "CiliumNetworkPolicy"},
		Resource:  metav1.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumnetworkpolicies"},
		Name:      name,
		Namespace: tst.Namespace,
		Operation: op,
		UserInfo:  authnv1.UserInfo{Username: user},
	}}
	if obj != nil {
		req.Object = raw(t, obj)
	}
	if old != nil {
		req.OldObject = raw(t, old)
	}
	return req
}

func TestCiliumHandler(t *testing.T) {
	claim := tst.MakeClaim("a").Obj()
	cnp := tst.MakeCNP(claim).Obj()
	cfg := tst.MakeConfig(fencev1alpha1.DefaultConfigName).Obj()
	// A host bound by selector only, in the namespaces labelled tier=agents.
	bySelector := tst.MakeConfig(fencev1alpha1.DefaultConfigName).NoHosts().SelectorHost(tst.HostUser, map[string]string{"tier": "agents"}).Obj()
	selected, unselected := tst.MakeNamespace(tst.Namespace, "tier", "agents"), tst.MakeNamespace(tst.Namespace, "tier", "other")
	ownerName := "metadata.ownerReferences[0].name"
	// kubectl prints only the causes of a 422 (The X "n" is invalid:
	// <field>: <message>), so each carries the family and says it was a
	// denial.
	const denied = "cilium-fence: denied by the sandbox-fence webhook: "
	// The host's CREATE of the policy of claim a, and what admits it.
	create, admitted := cnpRequest(t, admissionv1.Create, tst.HostUser, nil, cnp), verdict{Allowed: true}
	// The refusal of that CREATE for a claim being deleted.
	deleting := verdict{Code: 422, Reason: metav1.StatusReasonInvalid,
		Message: `cilium-fence: CiliumNetworkPolicy.cilium.io "namzu-sbx-uid-a" is invalid: metadata.ownerReferences[0]: Forbidden: the SandboxClaim "a" is being deleted; create the policy for a live owner`,
		Causes: []metav1.StatusCause{{Type: metav1.CauseTypeForbidden, Field: "metadata.ownerReferences[0]",
			Message: denied + `Forbidden: the SandboxClaim "a" is being deleted; create the policy for a live owner`}}}
	// The refusal of that CREATE for an owner found neither in the cache nor live.
	notFound := verdict{Code: 422, Reason: metav1.StatusReasonInvalid,
		Message: `cilium-fence: CiliumNetworkPolicy.cilium.io "namzu-sbx-uid-a" is invalid: metadata.ownerReferences[0].name: Not found: "a": no SandboxClaim named "a" in namespace "sandboxes"; create the owner before its policy`,
		Causes: []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueNotFound, Field: ownerName,
			Message: denied + `Not found: "a": no SandboxClaim named "a" in namespace "sandboxes"; create the owner before its policy`}}}

	cases := []struct {
		name      string
		config    *fencev1alpha1.FenceConfig
		cache     []client.Object
		live      []client.Object
		blockLive bool
		// cacheFirst turns on CachedOwners.CacheFirst; the owner cache
		// answers not found cacheMisses times first.
		cacheFirst  bool
		cacheMisses int
		// stale makes CachedOwners.Fresh say the owner watch is not current.
		stale      bool
		req        admission.Request
		want       verdict
		wantLive   int
		wantMetric string
	}{{
		name:       "the host's policy whose claim is in the cache and live is admitted after a live read",
		config:     cfg,
		cache:      []client.Object{claim},
		live:       []client.Object{claim},
		req:        create,
		want:       admitted,
		wantLive:   1,
		wantMetric: webhook.VerdictAllowed,
	}, {
		// The cache lags the API server: a hit that would admit is
		// confirmed live, so an owner whose deletion began a moment ago is
		// refused even before its watch event arrives.
		name:       "a cached owner the API server already shows as deleting is refused",
		config:     cfg,
		cache:      []client.Object{claim},
		live:       []client.Object{tst.MakeClaim("a").Deleting().Obj()},
		req:        create,
		wantLive:   1,
		want:       deleting,
		wantMetric: webhook.VerdictDenied,
	}, {
		name:     "a cached owner the API server already shows without its pod label is refused",
		config:   cfg,
		cache:    []client.Object{claim},
		live:     []client.Object{tst.MakeClaim("a").NoPodLabel(tst.LabelKey).Obj()},
		req:      create,
		wantLive: 1,
		want: verdict{Code: 422, Reason: metav1.StatusReasonInvalid,
			Message: `cilium-fence: CiliumNetworkPolicy.cilium.io "namzu-sbx-uid-a" is invalid: metadata.ownerReferences[0].name: Invalid value: "a": the SandboxClaim "a" does not carry the pod label sandbox.namzu.ai/per-sandbox-egress=a in spec.additionalPodMetadata.labels; set the label when creating the owner`,
			Causes: []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid, Field: ownerName,
				Message: denied + `Invalid value: "a": the SandboxClaim "a" does not carry the pod label sandbox.namzu.ai/per-sandbox-egress=a in spec.additionalPodMetadata.labels; set the label when creating the owner`}}},
		wantMetric: webhook.VerdictDenied,
	}, {
		name:       "a cached owner already deleting is refused without a live read: a deletion never reverses",
		config:     cfg,
		cache:      []client.Object{tst.MakeClaim("a").Deleting().Obj()},
		live:       []client.Object{claim},
		req:        create,
		want:       deleting,
		wantMetric: webhook.VerdictDenied,
	}, {
		name:       "a claim created a moment ago, not yet in the cache, is found by a live read",
		config:     cfg,
		live:       []client.Object{claim},
		req:        create,
		want:       admitted,
		wantLive:   1,
		wantMetric: webhook.VerdictAllowed,
	}, {
		name:       "a claim recreated under the same name is confirmed by a live read when the cache still has the old uid",
		config:     cfg,
		cache:      []client.Object{tst.MakeClaim("a").UID("uid-old").Obj()},
		live:       []client.Object{claim},
		req:        cnpRequest(t, admissionv1.Update, tst.HostUser, cnp, cnp),
		want:       admitted,
		wantLive:   1,
		wantMetric: webhook.VerdictAllowed,
	}, {
		name:       "with cache-first, a cached owner with the uid and the pod label admits without a live read",
		config:     cfg,
		cache:      []client.Object{claim},
		cacheFirst: true,
		req:        create,
		want:       admitted,
		wantMetric: webhook.VerdictAllowed,
	}, {
		// The watch broke (or went silent): the cached copy may miss a
		// deletion, so the live read decides.
		name:       "with cache-first, a cached owner whose watch is not current is read live, which shows it deleting",
		config:     cfg,
		cache:      []client.Object{claim},
		live:       []client.Object{tst.MakeClaim("a").Deleting().Obj()},
		cacheFirst: true, stale: true,
		req:        create,
		wantLive:   1,
		want:       deleting,
		wantMetric: webhook.VerdictDenied,
	}, {
		name:       "with cache-first, an owner the informer sees within the wait admits without a live read",
		config:     cfg,
		cache:      []client.Object{claim},
		cacheFirst: true, cacheMisses: 2,
		req:        create,
		want:       admitted,
		wantMetric: webhook.VerdictAllowed,
	}, {
		name:       "with cache-first, a cached copy without the pod label (set since) is confirmed by a live read",
		config:     cfg,
		cache:      []client.Object{tst.MakeClaim("a").NoPodLabel(tst.LabelKey).Obj()},
		live:       []client.Object{claim},
		cacheFirst: true,
		req:        create,
		want:       admitted,
		wantLive:   1,
		wantMetric: webhook.VerdictAllowed,
	}, {
		name:       "with cache-first, a claim the informer does not see within the wait is found by a live read",
		config:     cfg,
		live:       []client.Object{claim},
		cacheFirst: true,
		req:        create,
		want:       admitted,
		wantLive:   1,
		wantMetric: webhook.VerdictAllowed,
	}, {
		name:       "an invented owner found neither in the cache nor live is refused with 422 and its field",
		config:     cfg,
		req:        create,
		wantLive:   1,
		want:       notFound,
		wantMetric: webhook.VerdictDenied,
	}, {
		// No verdict on the write, so no 422, which a host reads as
		// final: a 503 that asks for a retry (fence.IsTransient).
		name:       "a live read that does not answer in time is refused as unavailable, to be retried",
		config:     cfg,
		blockLive:  true,
		req:        create,
		want:       verdict{Code: 503, Reason: metav1.StatusReasonServiceUnavailable, Message: `cilium-fence: metadata.ownerReferences[0].name: Internal error: looking up the SandboxClaim "a" in namespace "sandboxes" timed out (context deadline exceeded), so the owner could not be verified; retry`},
		wantMetric: webhook.VerdictError,
	}, {
		// The controller routes nobody here without a FenceConfig; the
		// egress policy refuses every ServiceAccount's policy writes in
		// opted-in namespaces meanwhile.
		name:       "a missing FenceConfig leaves a ServiceAccount's write to the egress policy",
		cache:      []client.Object{claim},
		req:        create,
		want:       admitted,
		wantLive:   1, // the FenceConfig, confirmed missing
		wantMetric: webhook.VerdictSkipped,
	}, {
		name:       "a missing FenceConfig never refuses the garbage collector's update (kube-system is never a host)",
		req:        cnpRequest(t, admissionv1.Update, "system:serviceaccount:kube-system:generic-garbage-collector", cnp, tst.MakeCNP(claim).OwnerRefs().Obj()),
		want:       admitted,
		wantMetric: webhook.VerdictSkipped,
	}, {
		name:       "a missing FenceConfig never refuses the namespace controller's delete",
		req:        cnpRequest(t, admissionv1.Delete, "system:serviceaccount:kube-system:namespace-controller", cnp, nil),
		want:       admitted,
		wantMetric: webhook.VerdictSkipped,
	}, {
		name:       "a missing FenceConfig never refuses a human user",
		req:        cnpRequest(t, admissionv1.Create, "alice@example.com", nil, cnp),
		want:       admitted,
		wantMetric: webhook.VerdictSkipped,
	}, {
		name:       "a ServiceAccount that is not a bound host is not checked",
		config:     cfg,
		live:       []client.Object{cfg},
		req:        cnpRequest(t, admissionv1.Create, "system:serviceaccount:gitops:argocd", nil, cnp),
		want:       admitted,
		wantLive:   1, // the FenceConfig, confirming it binds no such host
		wantMetric: webhook.VerdictSkipped,
	}, {
		// The controller routes a newly bound host here before its
		// policies admit it, and this replica's cache may not have the
		// change yet.
		name:       "a host bound since the cache last heard is checked once the FenceConfig is read live",
		config:     tst.MakeConfig(fencev1alpha1.DefaultConfigName).NoHosts().Obj(),
		live:       []client.Object{cfg},
		req:        create,
		wantLive:   2, // the FenceConfig, then the owner
		want:       notFound,
		wantMetric: webhook.VerdictDenied,
	}, {
		name:      "a routed identity the cache does not bind, whose FenceConfig cannot be read live, is refused as unavailable, to be retried",
		config:    tst.MakeConfig(fencev1alpha1.DefaultConfigName).NoHosts().Obj(),
		blockLive: true,
		req:       create,
		want: verdict{Code: 503, Reason: metav1.StatusReasonServiceUnavailable,
			Message: `cilium-fence: FenceConfig "sandbox-fence" could not be read (context deadline exceeded), so the write was not checked and is refused for now; retry`},
		wantMetric: webhook.VerdictError,
	}, {
		name:       "with a FenceConfig, a bound host's DELETE is left to the policy, which judges it",
		config:     cfg,
		req:        cnpRequest(t, admissionv1.Delete, tst.HostUser, cnp, nil),
		want:       admitted,
		wantMetric: webhook.VerdictSkipped,
	}, {
		name:   "a request for another kind is admitted untouched",
		config: cfg,
		req: func() admission.Request {
			r := create
			r.Kind = metav1.GroupVersionKind{Group: "networking.k8s.io", Version: "v1", Kind: "NetworkPolicy"}
			return r
		}(),
		want:       admitted,
		wantMetric: webhook.VerdictSkipped,
	}, {
		name:   "an object that is not JSON is refused with 422, not a panic",
		config: cfg,
		req: func() admission.Request {
			r := create
			r.Object.Raw = []byte(`["not", "an", "object"]`)
			return r
		}(),
		want: verdict{Code: 422, Reason: metav1.StatusReasonInvalid,
			Message: `cilium-fence: CiliumNetworkPolicy.cilium.io "namzu-sbx-uid-a" is invalid: object: Invalid value: null: the request's object is not a decodable CiliumNetworkPolicy: json: cannot unmarshal array into Go value of type map[string]interface {}`,
			Causes: []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid, Field: "object",
				Message: denied + `Invalid value: null: the request's object is not a decodable CiliumNetworkPolicy: json: cannot unmarshal array into Go value of type map[string]interface {}`}}},
		wantMetric: webhook.VerdictDenied,
	}, {
		name:   "a policy without owner is refused by field, not by a panic",
		config: cfg,
		req:    cnpRequest(t, admissionv1.Create, tst.HostUser, nil, tst.MakeCNP(claim).OwnerRefs().Obj()),
		want: verdict{Code: 422, Reason: metav1.StatusReasonInvalid,
			Message: `cilium-fence: CiliumNetworkPolicy.cilium.io "namzu-sbx-uid-a" is invalid: metadata.ownerReferences: Required value: a per-sandbox policy needs exactly one ownerReference, to the SandboxClaim or Sandbox it belongs to`,
			Causes: []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueRequired, Field: "metadata.ownerReferences",
				Message: denied + "Required value: a per-sandbox policy needs exactly one ownerReference, to the SandboxClaim or Sandbox it belongs to"}}},
		wantMetric: webhook.VerdictDenied,
	}, {
		name:   "the owner is looked up in the request's namespace, whatever the body says",
		config: tst.MakeConfig(fencev1alpha1.DefaultConfigName).NoHosts().Host(tst.HostUser, tst.Namespace, "other").Obj(),
		cache:  []client.Object{claim},
		req: func() admission.Request {
			r := create
			r.Namespace = "other"
			return r
		}(),
		wantLive: 1,
		want: verdict{Code: 422, Reason: metav1.StatusReasonInvalid,
			Message: `cilium-fence: CiliumNetworkPolicy.cilium.io "namzu-sbx-uid-a" is invalid: metadata.ownerReferences[0].name: Not found: "a": no SandboxClaim named "a" in namespace "other"; create the owner before its policy`,
			Causes: []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueNotFound, Field: ownerName,
				Message: denied + `Not found: "a": no SandboxClaim named "a" in namespace "other"; create the owner before its policy`}}},
		wantMetric: webhook.VerdictDenied,
	}, {
		name:   "a bound host's write outside its namespaces is the egress policy's to judge",
		config: cfg,
		cache:  []client.Object{claim},
		req: func() admission.Request {
			r := create
			r.Namespace = "other"
			return r
		}(),
		live:       []client.Object{cfg},
		want:       admitted,
		wantLive:   1, // the FenceConfig, confirming the namespace is not the host's
		wantMetric: webhook.VerdictSkipped,
	}, {
		// contract §4.7: bound by selector, so checked where the labels
		// match; the cache's match is trusted, as a check is the stricter
		// answer.
		name:       "a host bound by selector is checked in a namespace whose cached labels match, with no live namespace read",
		config:     bySelector,
		cache:      []client.Object{claim, selected},
		live:       []client.Object{claim},
		req:        create,
		want:       admitted,
		wantLive:   1,
		wantMetric: webhook.VerdictAllowed,
	}, {
		// An admin labelled the namespace a moment ago: the egress policy
		// binds the host there already, so the owner check runs too.
		name:       "a namespace the cache shows unselected is read live, and a label set a moment ago binds the host",
		config:     bySelector,
		cache:      []client.Object{claim, unselected},
		live:       []client.Object{selected},
		req:        create,
		wantLive:   2,
		want:       notFound,
		wantMetric: webhook.VerdictDenied,
	}, {
		name:       "a host bound by selector writing in a namespace its selector does not match is the egress policy's to judge",
		config:     bySelector,
		cache:      []client.Object{claim, unselected},
		live:       []client.Object{unselected},
		req:        create,
		want:       admitted,
		wantLive:   1,
		wantMetric: webhook.VerdictSkipped,
	}, {
		name:      "a namespace whose labels cannot be read is refused as unavailable, to be retried",
		config:    bySelector,
		cache:     []client.Object{claim},
		blockLive: true,
		req:       create,
		want: verdict{Code: 503, Reason: metav1.StatusReasonServiceUnavailable,
			Message: `cilium-fence: namespace "sandboxes" could not be read (context deadline exceeded), so whether system:serviceaccount:sandboxes:sandbox-host's namespaceSelector binds it is unknown and the write is refused for now; retry`},
		wantMetric: webhook.VerdictError,
	}, {
		name:     "a suspicious but valid write is admitted with a warning",
		config:   cfg,
		cache:    []client.Object{claim, tst.MakeClaim("b").PodLabel(tst.LabelKey, "a").Obj(), tst.MakeClaim("c").Obj()},
		live:     []client.Object{claim},
		wantLive: 1,
		req:      create,
		want: verdict{Allowed: true, Warnings: []string{
			"cilium-fence: spec.endpointSelector.matchLabels[sandbox.namzu.ai/per-sandbox-egress]: the pod label sandbox.namzu.ai/per-sandbox-egress=a is also carried by SandboxClaim/b, whose pods this policy would also let out; set spec.uniqueOwnerLabel in the FenceConfig to refuse this"}},
		wantMetric: webhook.VerdictAllowed,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cacheObjs := append([]client.Object(nil), tc.cache...)
			if tc.config != nil {
				cacheObjs = append(cacheObjs, tc.config)
			}
			live := &countingReader{Reader: fakeReader(t, tc.live...)}
			var liveReader client.Reader = live
			if tc.blockLive {
				liveReader = blockingReader{}
			}
			reg := prometheus.NewRegistry()
			m := webhook.NewMetrics(reg)
			cache := fakeReader(t, cacheObjs...)
			h := &webhook.CiliumHandler{
				Config: webhook.ConfigSource{Reader: cache, Live: liveReader, Name: fencev1alpha1.DefaultConfigName},
				Owners: &webhook.CachedOwners{Live: liveReader, Metrics: m, CacheFirst: tc.cacheFirst,
					Cache: &failingReader{Reader: cache, err: notCached, failures: tc.cacheMisses},
					Fresh: func(kind string) error {
						if tc.stale {
							return errors.New("the " + kind + " watch is not open")
						}
						return nil
					}},
				Namespaces:    &webhook.CachedNamespaces{Cache: cache, Live: liveReader},
				LookupTimeout: 100 * time.Millisecond,
				Metrics:       m,
			}
			got := verdictOf(h.Handle(context.Background(), tc.req))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("response (-want +got):\n%s", diff)
			}
			if !tc.blockLive && live.gets != tc.wantLive {
				t.Errorf("live reads: want %d, got %d", tc.wantLive, live.gets)
			}
			if n := (decisions(reg, webhook.RuleCiliumOwner, tc.wantMetric)); n != 1 {
				t.Errorf("%s{rule=%s,verdict=%s} = %v, want 1", webhook.DecisionsMetric, webhook.RuleCiliumOwner, tc.wantMetric, n)
			}
		})
	}
}

// decisions reads the counter for rule and verdict by gathering the
// registry, as Prometheus would scrape it.
func decisions(reg *prometheus.Registry, rule, verdictLabel string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return -1
	}
	for _, mf := range mfs {
		if mf.GetName() != webhook.DecisionsMetric {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["rule"] == rule && labels["verdict"] == verdictLabel {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// An unreadable configuration (not merely absent: the cache not synced, or
// stopped during shutdown) fails closed too, but as a retryable 503: a 422
// would tell the host its write is wrong when only the webhook was not ready.
func TestCiliumHandlerConfigUnreadable(t *testing.T) {
	h := &webhook.CiliumHandler{
		Config:        webhook.ConfigSource{Reader: errReader{errors.New("cache not synced")}, Name: "cfg"},
		Owners:        tst.NewFakeOwners(),
		LookupTimeout: 100 * time.Millisecond,
	}
	got := verdictOf(h.Handle(context.Background(), cnpRequest(t, admissionv1.Create, tst.HostUser, nil, tst.MakeCNP(tst.MakeClaim("a").Obj()).Obj())))
	want := verdict{Code: 503, Reason: metav1.StatusReasonServiceUnavailable, Message: `cilium-fence: FenceConfig "cfg" could not be read (cache not synced), so the write was not checked and is refused for now; retry`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
}

type errReader struct{ err error }

func (e errReader) Get(context.Context, types.NamespacedName, client.Object, ...client.GetOption) error {
	return e.err
}

func (e errReader) List(context.Context, client.ObjectList, ...client.ListOption) error { return e.err }
