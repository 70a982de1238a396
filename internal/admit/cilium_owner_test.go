package admit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/internal/admit"
	tst "github.com/sandbox-fence/sandbox-fence/internal/testing"
)

func TestValidateCiliumOwner(t *testing.T) {
	refs := field.NewPath("metadata", "ownerReferences")
	ref0 := refs.Index(0)
	selector := field.NewPath("spec", "endpointSelector", "matchLabels").Key(tst.LabelKey)

	claim := tst.MakeClaim("a").Obj()
	sandbox := tst.MakeSandbox("s").Obj()
	long := strings.Repeat("x", 64)
	timeout := fmt.Errorf("get: %w", context.DeadlineExceeded)
	boom := apierrors.NewServiceUnavailable("etcd is down")
	claimRef := metav1.OwnerReference{APIVersion: "extensions.agents.x-k8s.io/v1beta1", Kind: "SandboxClaim", Name: "a", UID: "uid-a"}
	// The refusal of claim a's policy when the claim does not label its pods.
	unlabelled := field.Invalid(ref0.Child("name"), "a", "the SandboxClaim \"a\" does not carry the pod label sandbox.namzu.ai/per-sandbox-egress=a in spec.additionalPodMetadata.labels; set the label when creating the owner")

	cases := []struct {
		name         string
		cfg          *fencev1alpha1.FenceConfig
		owners       admit.OwnerLookup
		old, obj     *unstructured.Unstructured
		wantErrs     field.ErrorList
		wantWarnings []string
	}{{
		name:   "the host's policy owned by a live claim that labels its pods is admitted",
		owners: tst.NewFakeOwners(claim),
		obj:    tst.MakeCNP(claim).Obj(),
	}, {
		name:   "the pool-less policy owned by a live Sandbox that labels its pods is admitted",
		owners: tst.NewFakeOwners(sandbox),
		obj:    tst.MakeCNP(sandbox).Obj(),
	}, {
		name:   "an update replacing the policy of a live owner is admitted",
		owners: tst.NewFakeOwners(claim),
		old:    tst.MakeCNP(claim).Obj(),
		obj:    tst.MakeCNP(claim).Obj(),
	}, {
		name:   "the configured label key is the one the owner must carry",
		cfg:    tst.MakeConfig("sandbox-fence").LabelKey("example.com/egress").Obj(),
		owners: tst.NewFakeOwners(tst.MakeClaim("a").NoPodLabel(tst.LabelKey).PodLabel("example.com/egress", "a").Obj()),
		obj:    tst.MakeCNP(claim).Obj(),
	}, {
		name:   "the default label key no longer counts once another key is configured",
		cfg:    tst.MakeConfig("sandbox-fence").LabelKey("example.com/egress").Obj(),
		owners: tst.NewFakeOwners(claim),
		obj:    tst.MakeCNP(claim).Obj(),
		wantErrs: field.ErrorList{field.Invalid(ref0.Child("name"), "a",
			"the SandboxClaim \"a\" does not carry the pod label example.com/egress=a in spec.additionalPodMetadata.labels; set the label when creating the owner")},
	}, {
		name:   "a FenceConfig served through a CRD older than its label key's default refuses and says to apply the CRD",
		cfg:    tst.MakeConfig("sandbox-fence").LabelKey("").Obj(),
		owners: tst.NewFakeOwners(claim),
		obj:    tst.MakeCNP(claim).Obj(),
		wantErrs: field.ErrorList{field.Required(field.NewPath("FenceConfig", "spec", "perSandboxLabelKey"),
			"the FenceConfig names no per-sandbox label key and its CRD supplies no default: apply this release's CRD first (docs/install.md, Upgrade)")},
	}, {
		name:     "a policy without ownerReferences names the missing field",
		owners:   tst.NewFakeOwners(claim),
		obj:      tst.MakeCNP(claim).OwnerRefs().Obj(),
		wantErrs: field.ErrorList{field.Required(refs, "a per-sandbox policy needs exactly one ownerReference, to the SandboxClaim or Sandbox it belongs to")},
	}, {
		name:     "ownerReferences that is not a list reads as none and does not panic",
		owners:   tst.NewFakeOwners(claim),
		obj:      tst.MakeCNP(claim).Set("not-a-list", "metadata", "ownerReferences").Obj(),
		wantErrs: field.ErrorList{field.Required(refs, "a per-sandbox policy needs exactly one ownerReference, to the SandboxClaim or Sandbox it belongs to")},
	}, {
		name:     "two ownerReferences are too many to tell which owner counts",
		owners:   tst.NewFakeOwners(claim, sandbox),
		obj:      tst.MakeCNP(claim).OwnedBy(sandbox).Obj(),
		wantErrs: field.ErrorList{field.TooMany(refs, 2, 1)},
	}, {
		name:   "an owner of a foreign kind cannot be looked up",
		owners: tst.NewFakeOwners(claim),
		obj:    tst.MakeCNP(claim).OwnerRefs(metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "a", UID: "uid-a"}).Obj(),
		wantErrs: field.ErrorList{field.NotSupported(ref0, "apps/v1, Kind=Deployment",
			[]string{"extensions.agents.x-k8s.io/v1beta1, Kind=SandboxClaim", "agents.x-k8s.io/v1beta1, Kind=Sandbox"})},
	}, {
		name:   "a claim kind paired with the Sandbox apiVersion is no owner",
		owners: tst.NewFakeOwners(claim),
		obj:    tst.MakeCNP(claim).OwnerRefs(metav1.OwnerReference{APIVersion: "agents.x-k8s.io/v1beta1", Kind: "SandboxClaim", Name: "a", UID: "uid-a"}).Obj(),
		wantErrs: field.ErrorList{field.NotSupported(ref0, "agents.x-k8s.io/v1beta1, Kind=SandboxClaim",
			[]string{"extensions.agents.x-k8s.io/v1beta1, Kind=SandboxClaim", "agents.x-k8s.io/v1beta1, Kind=Sandbox"})},
	}, {
		name:     "an owner reference without a name is refused before any lookup",
		owners:   &tst.FakeOwners{GetErr: errors.New("must not be called")},
		obj:      tst.MakeCNP(claim).OwnerRefs(metav1.OwnerReference{APIVersion: claimRef.APIVersion, Kind: claimRef.Kind, UID: "uid-a"}).Obj(),
		wantErrs: field.ErrorList{field.Required(ref0.Child("name"), "the owner's name is the selector value and cannot be empty")},
	}, {
		name:   "an owner name longer than a label value can label no pod",
		owners: &tst.FakeOwners{GetErr: errors.New("must not be called")},
		obj:    tst.MakeCNP(claim).OwnerRefs(metav1.OwnerReference{APIVersion: claimRef.APIVersion, Kind: claimRef.Kind, Name: long, UID: "uid-a"}).Obj(),
		wantErrs: field.ErrorList{field.Invalid(ref0.Child("name"), long,
			"the owner's name must be a valid label value: must be no more than 63 bytes")},
	}, {
		name:     "an invented owner that does not exist is not found",
		owners:   tst.NewFakeOwners(),
		obj:      tst.MakeCNP(claim).Obj(),
		wantErrs: field.ErrorList{notFound(ref0.Child("name"), "a", "no SandboxClaim named \"a\" in namespace \"sandboxes\"; create the owner before its policy")},
	}, {
		name:     "an owner of the same name in another namespace does not count",
		owners:   tst.NewFakeOwners(tst.MakeClaim("a").Namespace("elsewhere").Obj()),
		obj:      tst.MakeCNP(claim).Obj(),
		wantErrs: field.ErrorList{notFound(ref0.Child("name"), "a", "no SandboxClaim named \"a\" in namespace \"sandboxes\"; create the owner before its policy")},
	}, {
		name:   "an owner recreated under the same name has another uid",
		owners: tst.NewFakeOwners(tst.MakeClaim("a").UID("uid-new").Obj()),
		obj:    tst.MakeCNP(claim).Obj(),
		wantErrs: field.ErrorList{field.Invalid(ref0.Child("uid"), "uid-a",
			"the live SandboxClaim \"a\" in namespace \"sandboxes\" has uid \"uid-new\"; the policy must reference its owner's current uid")},
	}, {
		name:   "a live object served under another apiVersion than the reference is refused",
		owners: tst.NewFakeOwners(tst.MakeClaim("a").Kind("extensions.agents.x-k8s.io/v1alpha1", "SandboxClaim").Obj()),
		obj:    tst.MakeCNP(claim).Obj(),
		wantErrs: field.ErrorList{field.Invalid(ref0.Child("kind"), "extensions.agents.x-k8s.io/v1beta1, Kind=SandboxClaim",
			"the live object \"a\" is extensions.agents.x-k8s.io/v1alpha1, Kind=SandboxClaim")},
	}, {
		name:     "a terminating owner gets no new policy",
		owners:   tst.NewFakeOwners(tst.MakeClaim("a").Deleting().Obj()),
		obj:      tst.MakeCNP(claim).Obj(),
		wantErrs: field.ErrorList{field.Forbidden(ref0, "the SandboxClaim \"a\" is being deleted; create the policy for a live owner")},
	}, {
		name:     "an owner that does not label its pods is refused",
		owners:   tst.NewFakeOwners(tst.MakeClaim("a").NoPodLabel(tst.LabelKey).Obj()),
		obj:      tst.MakeCNP(claim).Obj(),
		wantErrs: field.ErrorList{unlabelled},
	}, {
		name:   "an owner whose pods carry another sandbox's value is refused and the value shown",
		owners: tst.NewFakeOwners(tst.MakeSandbox("s").PodLabel(tst.LabelKey, "victim").Obj()),
		obj:    tst.MakeCNP(sandbox).Obj(),
		wantErrs: field.ErrorList{field.Invalid(ref0.Child("name"), "s",
			"the Sandbox \"s\" does not carry the pod label sandbox.namzu.ai/per-sandbox-egress=s in spec.podTemplate.metadata.labels (it has sandbox.namzu.ai/per-sandbox-egress=victim); set the label when creating the owner")},
	}, {
		name:     "labels in the owner's own metadata are not its pods' labels",
		owners:   tst.NewFakeOwners(withObjectLabel(tst.MakeClaim("a").NoPodLabel(tst.LabelKey).Obj(), tst.LabelKey, "a")),
		obj:      tst.MakeCNP(claim).Obj(),
		wantErrs: field.ErrorList{unlabelled},
	}, {
		name:     "pod labels of the wrong type read as none and do not panic",
		owners:   tst.NewFakeOwners(tst.MakeClaim("a").Set("oops", "spec", "additionalPodMetadata", "labels").Obj()),
		obj:      tst.MakeCNP(claim).Obj(),
		wantErrs: field.ErrorList{unlabelled},
	}, {
		name:   "every owner defect is reported at once",
		owners: tst.NewFakeOwners(tst.MakeClaim("a").UID("uid-new").Deleting().NoPodLabel(tst.LabelKey).Obj()),
		obj:    tst.MakeCNP(claim).Obj(),
		wantErrs: field.ErrorList{
			field.Invalid(ref0.Child("uid"), "uid-a", "the live SandboxClaim \"a\" in namespace \"sandboxes\" has uid \"uid-new\"; the policy must reference its owner's current uid"),
			field.Forbidden(ref0, "the SandboxClaim \"a\" is being deleted; create the policy for a live owner"),
			unlabelled,
		},
	}, {
		name:   "a lookup that times out fails closed and says so",
		owners: &tst.FakeOwners{GetErr: timeout},
		obj:    tst.MakeCNP(claim).Obj(),
		wantErrs: field.ErrorList{field.InternalError(ref0.Child("name"), errors.New(
			"looking up the SandboxClaim \"a\" in namespace \"sandboxes\" timed out (get: context deadline exceeded), so the owner could not be verified"))},
	}, {
		name:   "a lookup the API server fails fails closed",
		owners: &tst.FakeOwners{GetErr: boom},
		obj:    tst.MakeCNP(claim).Obj(),
		wantErrs: field.ErrorList{field.InternalError(ref0.Child("name"), errors.New(
			"looking up the SandboxClaim \"a\" in namespace \"sandboxes\" failed (etcd is down), so the owner could not be verified"))},
	}, {
		name:         "another claim carrying the same pod label is admitted with a warning when uniqueness is off",
		owners:       tst.NewFakeOwners(claim, tst.MakeClaim("b").PodLabel(tst.LabelKey, "a").Obj()),
		obj:          tst.MakeCNP(claim).Obj(),
		wantWarnings: []string{"spec.endpointSelector.matchLabels[sandbox.namzu.ai/per-sandbox-egress]: the pod label sandbox.namzu.ai/per-sandbox-egress=a is also carried by SandboxClaim/b, whose pods this policy would also let out; set spec.uniqueOwnerLabel in the FenceConfig to refuse this"},
	}, {
		name:   "claims and Sandboxes carrying the same pod label are refused when uniqueness is on",
		cfg:    tst.MakeConfig("sandbox-fence").UniqueOwnerLabel().Obj(),
		owners: tst.NewFakeOwners(claim, tst.MakeClaim("c").PodLabel(tst.LabelKey, "a").Obj(), tst.MakeSandbox("b").PodLabel(tst.LabelKey, "a").Obj()),
		obj:    tst.MakeCNP(claim).Obj(),
		wantErrs: field.ErrorList{duplicate(selector, "a",
			"the pod label sandbox.namzu.ai/per-sandbox-egress=a is also carried by Sandbox/b, SandboxClaim/c, whose pods this policy would also let out (spec.uniqueOwnerLabel is set); give each sandbox its own label value")},
	}, {
		name:   "the Sandbox a claim adopted inherits its pod label and is the same sandbox",
		cfg:    tst.MakeConfig("sandbox-fence").UniqueOwnerLabel().Obj(),
		owners: tst.NewFakeOwners(claim, tst.MakeSandbox("pool-x1").PodLabel(tst.LabelKey, "a").OwnedBy(claim).Obj()),
		obj:    tst.MakeCNP(claim).Obj(),
	}, {
		// A claim has one Sandbox. A second one owned by the claim and
		// carrying its label is another sandbox whose pods the policy would
		// let out too, however it got its owner reference.
		name: "two Sandboxes owned by the same claim and carrying its label are refused when uniqueness is on",
		cfg:  tst.MakeConfig("sandbox-fence").UniqueOwnerLabel().Obj(),
		owners: tst.NewFakeOwners(claim,
			tst.MakeSandbox("pool-x1").PodLabel(tst.LabelKey, "a").OwnedBy(claim).Obj(),
			tst.MakeSandbox("pool-x2").PodLabel(tst.LabelKey, "a").OwnedBy(claim).Obj()),
		obj: tst.MakeCNP(claim).Obj(),
		wantErrs: field.ErrorList{duplicate(selector, "a",
			"the pod label sandbox.namzu.ai/per-sandbox-egress=a is also carried by Sandbox/pool-x1, Sandbox/pool-x2, whose pods this policy would also let out (spec.uniqueOwnerLabel is set); give each sandbox its own label value")},
	}, {
		name:   "a Sandbox owned by a Sandbox owner and carrying its label is another sandbox",
		cfg:    tst.MakeConfig("sandbox-fence").UniqueOwnerLabel().Obj(),
		owners: tst.NewFakeOwners(sandbox, tst.MakeSandbox("s2").PodLabel(tst.LabelKey, "s").OwnedBy(sandbox).Obj()),
		obj:    tst.MakeCNP(sandbox).Obj(),
		wantErrs: field.ErrorList{duplicate(selector, "s",
			"the pod label sandbox.namzu.ai/per-sandbox-egress=s is also carried by Sandbox/s2, whose pods this policy would also let out (spec.uniqueOwnerLabel is set); give each sandbox its own label value")},
	}, {
		name:   "a stale list entry of the owner itself under its previous uid does not count",
		cfg:    tst.MakeConfig("sandbox-fence").UniqueOwnerLabel().Obj(),
		owners: &staleList{FakeOwners: tst.NewFakeOwners(claim), stale: tst.MakeClaim("a").UID("uid-old").Obj()},
		obj:    tst.MakeCNP(claim).Obj(),
	}, {
		name:   "the same label value in another namespace does not count",
		cfg:    tst.MakeConfig("sandbox-fence").UniqueOwnerLabel().Obj(),
		owners: tst.NewFakeOwners(claim, tst.MakeClaim("a").Namespace("elsewhere").UID("uid-other").Obj()),
		obj:    tst.MakeCNP(claim).Obj(),
	}, {
		name:   "a failed list fails closed when uniqueness is on",
		cfg:    tst.MakeConfig("sandbox-fence").UniqueOwnerLabel().Obj(),
		owners: &tst.FakeOwners{Objects: []*unstructured.Unstructured{claim}, ListErr: timeout},
		obj:    tst.MakeCNP(claim).Obj(),
		wantErrs: field.ErrorList{field.InternalError(selector, errors.New(
			"looking up the SandboxClaim in namespace \"sandboxes\" timed out (get: context deadline exceeded), so the owner could not be verified"))},
	}, {
		name:   "a failed list only skips the warning when uniqueness is off",
		owners: &tst.FakeOwners{Objects: []*unstructured.Unstructured{claim}, ListErr: timeout},
		obj:    tst.MakeCNP(claim).Obj(),
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			if cfg == nil {
				cfg = tst.MakeConfig("sandbox-fence").Obj()
			}
			gotErrs, gotWarnings := admit.ValidateCiliumOwner(context.Background(), &cfg.Spec, tc.owners, tc.old, tc.obj)
			if diff := cmp.Diff(tc.wantErrs, gotErrs, tst.ErrorsByMessage); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantWarnings, gotWarnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

func notFound(p *field.Path, v any, detail string) *field.Error {
	e := field.NotFound(p, v)
	e.Detail = detail
	return e
}

func duplicate(p *field.Path, v any, detail string) *field.Error {
	e := field.Duplicate(p, v)
	e.Detail = detail
	return e
}

func withObjectLabel(u *unstructured.Unstructured, k, v string) *unstructured.Unstructured {
	u.SetLabels(map[string]string{k: v})
	return u
}

// staleList answers lists with an outdated copy of an object, as an
// informer does for a moment after the object was recreated.
type staleList struct {
	*tst.FakeOwners
	stale *unstructured.Unstructured
}

func (s *staleList) OwnersLabelled(ctx context.Context, k admit.OwnerKind, ns, key, value string) ([]unstructured.Unstructured, error) {
	items, err := s.FakeOwners.OwnersLabelled(ctx, k, ns, key, value)
	if k.GVK.Kind == s.stale.GetKind() {
		for i := range items {
			if items[i].GetName() == s.stale.GetName() {
				items[i] = *s.stale.DeepCopy()
			}
		}
	}
	return items, err
}
