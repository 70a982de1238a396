package fence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/clock"
)

// maxAttempts bounds every retry loop of a write or a fenced delete.
const maxAttempts = 3

// Options configure a Client. The zero value is the shipped defaults.
type Options struct {
	// EgressPolicyName is the ValidatingAdmissionPolicy that fences
	// per-sandbox egress; "" means DefaultEgressPolicyName.
	EgressPolicyName string
	// EgressBindingName is its binding; "" means EgressPolicyName + "-binding".
	EgressBindingName string
	// LabelKey is the per-sandbox endpointSelector key used when a
	// PolicyInput names none; "" means DefaultPerSandboxLabelKey.
	LabelKey string
	// Clock stamps operating-mode-changed-at; nil means the wall clock.
	// Tests pass a k8s.io/utils/clock/testing fake.
	Clock clock.PassiveClock
	// Retry paces the repeats of a request whose answer was transient
	// (IsTransient), within the caller's context; a zero Steps means
	// DefaultRetry. The last transient error is returned when the steps
	// or the context run out.
	Retry wait.Backoff
}

// DefaultRetry repeats a transient answer five times over about six
// seconds: past the webhook's own retries of an unreachable API server
// (its lookup deadline, 3 s) and the moments an API server or a webhook
// replica restarts.
var DefaultRetry = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 6, Cap: 5 * time.Second}

// Client drives Sandboxes and per-sandbox egress policies through the
// dynamic client with the host's wire contract: a gate read before every
// fenced write, one conditional JSON Patch built from that read, and bounded
// retries. Errors match the sentinels of this package
// (ErrStaleEpoch, ErrUnreadableEpoch, ErrPatchNotApplied, ErrConflict,
// ErrGone, ErrFenceNotInstalled, ErrReadBackMismatch) or are an
// *AdmissionDeniedError; the API error stays reachable with errors.As.
//
// Every Sandbox write and delete takes the held epoch the same way, in
// WriteOptions.
type Client struct {
	dyn         dynamic.Interface
	opts        Options
	fenceExists atomic.Bool
}

// WriteOptions are the options of a Sandbox write or delete, as
// metav1.UpdateOptions are client-go's. The zero value sends the unfenced
// request the host always sent, which the server admits without looking at
// epochs.
type WriteOptions struct {
	// Epoch is the holder epoch the caller holds (ptr.To from
	// k8s.io/utils/ptr builds one); set, the write or delete is fenced on
	// it. Stamp, whose whole job is the epoch, refuses nil.
	Epoch *uint64
}

// NewClient returns a Client over dyn.
func NewClient(dyn dynamic.Interface, opts Options) *Client {
	if opts.EgressPolicyName == "" {
		opts.EgressPolicyName = DefaultEgressPolicyName
	}
	if opts.EgressBindingName == "" {
		opts.EgressBindingName = opts.EgressPolicyName + bindingSuffix
	}
	if opts.LabelKey == "" {
		opts.LabelKey = DefaultPerSandboxLabelKey
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Retry.Steps == 0 {
		opts.Retry = DefaultRetry
	}
	return &Client{dyn: dyn, opts: opts}
}

// call runs one API request, and runs it again while its answer is
// transient (IsTransient), paced by Options.Retry and bounded by ctx. A
// request is repeated only when it got no verdict, so each repeat is the
// same request: a write that did land before its answer was lost is met
// by the contract's own checks on the next attempt (AlreadyExists for a
// create, a moved object for a fenced patch).
func (c *Client) call(ctx context.Context, request func() error) error {
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, c.opts.Retry, func(context.Context) (bool, error) {
		last = request()
		switch {
		case last == nil:
			return true, nil
		case IsTransient(last):
			return false, nil
		}
		return false, last
	})
	if err != nil && wait.Interrupted(err) && last != nil {
		return last
	}
	return err
}

// get, create, patch and remove are the requests the Client sends, each
// through call.
func (c *Client) get(ctx context.Context, ri dynamic.ResourceInterface, name string) (out *unstructured.Unstructured, err error) {
	err = c.call(ctx, func() (err error) { out, err = ri.Get(ctx, name, metav1.GetOptions{}); return err })
	return out, err
}

func (c *Client) create(ctx context.Context, ri dynamic.ResourceInterface, obj *unstructured.Unstructured) (out *unstructured.Unstructured, err error) {
	err = c.call(ctx, func() (err error) { out, err = ri.Create(ctx, obj, metav1.CreateOptions{}); return err })
	return out, err
}

func (c *Client) patch(ctx context.Context, ri dynamic.ResourceInterface, name string, pt types.PatchType, body []byte) (out *unstructured.Unstructured, err error) {
	err = c.call(ctx, func() (err error) { out, err = ri.Patch(ctx, name, pt, body, metav1.PatchOptions{}); return err })
	return out, err
}

func (c *Client) remove(ctx context.Context, ri dynamic.ResourceInterface, name string, opts metav1.DeleteOptions) error {
	return c.call(ctx, func() error { return ri.Delete(ctx, name, opts) })
}

func (c *Client) sandboxes(namespace string) dynamic.ResourceInterface {
	return c.dyn.Resource(SandboxGVR).Namespace(namespace)
}

// CreateWorkspace POSTs a Sandbox with the annotations of contract §3.3: the
// pod-template-hash of spec.podTemplate and, when opts.Epoch is set, the
// holder epoch. The caller's object is not modified.
func (c *Client) CreateWorkspace(ctx context.Context, sandbox *unstructured.Unstructured, opts WriteOptions) (*unstructured.Unstructured, error) {
	obj := sandbox.DeepCopy()
	template, found, err := unstructured.NestedFieldNoCopy(obj.Object, "spec", "podTemplate")
	if err != nil || !found {
		return nil, fmt.Errorf("sandbox %s/%s: spec.podTemplate is required (the pod-template-hash is computed from it)", obj.GetNamespace(), obj.GetName())
	}
	hash, err := PodTemplateHash(template)
	if err != nil {
		return nil, err
	}
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[AnnotationPodTemplateHash] = hash
	if epoch := opts.Epoch; epoch != nil {
		if *epoch > MaxEpoch {
			return nil, fmt.Errorf("epoch %d is above %d (contract §3.1)", *epoch, MaxEpoch)
		}
		annotations[AnnotationHolderEpoch] = FormatEpoch(*epoch)
	}
	obj.SetAnnotations(annotations)
	out, err := c.create(ctx, c.sandboxes(obj.GetNamespace()), obj)
	if err != nil {
		return nil, classify(err, "create sandbox "+obj.GetNamespace()+"/"+obj.GetName())
	}
	return out, nil
}

// Suspend sets spec.operatingMode Suspended (also used to destroy without
// deleting the disk, retire and clean up).
func (c *Client) Suspend(ctx context.Context, namespace, name string, opts WriteOptions) (*unstructured.Unstructured, error) {
	return c.setMode(ctx, namespace, name, ModeSuspended, opts.Epoch)
}

// Resume sets spec.operatingMode Running.
func (c *Client) Resume(ctx context.Context, namespace, name string, opts WriteOptions) (*unstructured.Unstructured, error) {
	return c.setMode(ctx, namespace, name, ModeRunning, opts.Epoch)
}

func (c *Client) setMode(ctx context.Context, namespace, name, mode string, epoch *uint64) (*unstructured.Unstructured, error) {
	return c.write(ctx, namespace, name, epoch, func(_ *unstructured.Unstructured, read Reading) (PatchInput, error) {
		return PatchInput{Read: read, Epoch: epoch, Mode: mode, ChangedAt: FormatChangedAt(c.opts.Clock.Now())}, nil
	})
}

// Stamp writes the epoch alone onto a workspace already in the wanted mode.
// A nil opts.Epoch is refused locally: there is nothing to stamp.
func (c *Client) Stamp(ctx context.Context, namespace, name string, opts WriteOptions) (*unstructured.Unstructured, error) {
	epoch := opts.Epoch
	if epoch == nil {
		return nil, fmt.Errorf("stamp sandbox %s/%s: an epoch is required (WriteOptions{Epoch: ptr.To(uint64(n))})", namespace, name)
	}
	return c.write(ctx, namespace, name, epoch, func(_ *unstructured.Unstructured, read Reading) (PatchInput, error) {
		return PatchInput{Read: read, Epoch: epoch}, nil
	})
}

// RefreshTemplate replaces the pod template of a Suspended workspace and
// resumes it, as one JSON Patch conditional on the workspace still being
// Suspended. A workspace that is not Suspended is
// refused locally with ErrPatchNotApplied.
func (c *Client) RefreshTemplate(ctx context.Context, namespace, name string, template any, opts WriteOptions) (*unstructured.Unstructured, error) {
	epoch := opts.Epoch
	if template == nil {
		return nil, fmt.Errorf("sandbox %s/%s: a template refresh needs the new pod template", namespace, name)
	}
	hash, err := PodTemplateHash(template)
	if err != nil {
		return nil, err
	}
	return c.write(ctx, namespace, name, epoch, func(obj *unstructured.Unstructured, read Reading) (PatchInput, error) {
		if mode, _, _ := unstructured.NestedString(obj.Object, "spec", "operatingMode"); mode != ModeSuspended {
			return PatchInput{}, fmt.Errorf("%w: sandbox %s/%s is %q; a template refresh needs it Suspended", ErrPatchNotApplied, namespace, name, mode)
		}
		return PatchInput{
			Read: read, Epoch: epoch, Mode: ModeRunning, ChangedAt: FormatChangedAt(c.opts.Clock.Now()),
			ExtraAnnotations: []Annotation{{AnnotationPodTemplateHash, hash}},
			PodTemplate:      template,
			ExtraTests:       []Operation{{OpTest, "/spec/operatingMode", ModeSuspended}},
		}, nil
	})
}

// buildPatch turns the object as read into the patch to send, or refuses
// the write locally with an error (nothing is sent).
type buildPatch func(obj *unstructured.Unstructured, read Reading) (PatchInput, error)

// write runs one fenced or unfenced PATCH: gate read, refuse
// locally, send, and on a 422 re-read and retry only if the object moved.
// build runs on every read, so a refusal sees the object as it is now.
func (c *Client) write(ctx context.Context, namespace, name string, epoch *uint64, build buildPatch) (*unstructured.Unstructured, error) {
	what := "sandbox " + namespace + "/" + name
	obj, err := c.get(ctx, c.sandboxes(namespace), name)
	if err != nil {
		return nil, classify(err, "read "+what)
	}
	read := ReadHolderEpoch(obj)
	for attempt := 1; ; attempt++ {
		if epoch != nil {
			if err := read.check(what, *epoch); err != nil {
				return nil, err
			}
		}
		in, err := build(obj, read)
		if err != nil {
			return nil, err
		}
		patchType, body, err := patchBody(in)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out, err := c.patch(ctx, c.sandboxes(namespace), name, patchType, body)
		if err == nil {
			return out, nil
		}
		if !apierrors.IsInvalid(err) {
			return nil, classify(err, "patch "+what)
		}
		if denied := classify(err, "patch "+what); !errors.Is(denied, ErrPatchNotApplied) {
			return nil, denied
		}
		// A 422 without an admission message is a failed test op or a bad
		// patch; only a moved object makes a retry meaningful.
		now, gerr := c.get(ctx, c.sandboxes(namespace), name)
		if gerr != nil {
			return nil, classify(gerr, "re-read "+what)
		}
		nowRead := ReadHolderEpoch(now)
		if !read.moved(nowRead) {
			return nil, fmt.Errorf("patch %s: %w (the object did not move since the read, so a test clause or the patch itself failed): %w", what, ErrPatchNotApplied, err)
		}
		if attempt == maxAttempts {
			return nil, fmt.Errorf("patch %s: %w after %d attempts, the object kept moving: %w", what, ErrPatchNotApplied, maxAttempts, err)
		}
		obj, read = now, nowRead
	}
}

// patchBody is the fenced JSON Patch, or the unfenced merge patch when the
// write carries no epoch and no test.
func patchBody(in PatchInput) (types.PatchType, []byte, error) {
	if in.Epoch == nil && len(in.ExtraTests) == 0 && in.PodTemplate == nil {
		body, err := BuildMergePatch(in)
		return types.MergePatchType, body, err
	}
	ops, err := BuildHolderEpochPatch(in)
	if err != nil {
		return "", nil, err
	}
	body, err := MarshalPatch(ops)
	return types.JSONPatchType, body, err
}

// Delete deletes a Sandbox. With opts.Epoch it is the fenced DELETE of contract §3.4:
// preconditions.resourceVersion of the gate read, re-read and re-checked on a
// 409, three attempts at most. A Sandbox already gone counts as deleted.
func (c *Client) Delete(ctx context.Context, namespace, name string, opts WriteOptions) error {
	epoch := opts.Epoch
	what := "sandbox " + namespace + "/" + name
	return c.fencedDelete(ctx, c.sandboxes(namespace), name, what, epoch, func(obj *unstructured.Unstructured) error {
		return ReadHolderEpoch(obj).check(what, *epoch)
	})
}

// DeleteClaim deletes a SandboxClaim, and with it (garbage collection) the
// Sandbox the claim owns. With opts.Epoch it is the fenced claim DELETE that
// strict delete requires (contract §8.4): it reads the claim and the
// Sandboxes the claim owns, refuses locally, sending nothing, when one's
// stored epoch is above the held one or malformed, and DELETEs the claim
// with preconditions.resourceVersion of that read; on a 409 it reads,
// checks and retries, three attempts at most. A claim already gone counts
// as deleted. The precondition ties the DELETE to the claim the check
// read; the Sandbox's epoch is checked here only, since the server cannot
// see it from the claim.
func (c *Client) DeleteClaim(ctx context.Context, namespace, name string, opts WriteOptions) error {
	epoch := opts.Epoch
	what := "sandbox claim " + namespace + "/" + name
	return c.fencedDelete(ctx, c.dyn.Resource(SandboxClaimGVR).Namespace(namespace), name, what, epoch, func(claim *unstructured.Unstructured) error {
		var sandboxes *unstructured.UnstructuredList
		err := c.call(ctx, func() (err error) {
			sandboxes, err = c.sandboxes(namespace).List(ctx, metav1.ListOptions{})
			return err
		})
		if err != nil {
			return classify(err, "list the sandboxes of "+what)
		}
		for i := range sandboxes.Items {
			s := &sandboxes.Items[i]
			if !ownedBy(s, claim.GetUID()) {
				continue
			}
			if err := ReadHolderEpoch(s).check("sandbox "+namespace+"/"+s.GetName()+" of "+what, *epoch); err != nil {
				return err
			}
		}
		return nil
	})
}

// fencedDelete is the fenced DELETE of Delete and DeleteClaim for the object name of ri.
// Without an epoch it sends an unconditional DELETE. With one it reads the
// object, lets check refuse (an error sends nothing), DELETEs with
// preconditions.resourceVersion of that read, and on a 409 reads, checks
// and retries, three attempts at most. An object already gone counts as
// deleted.
func (c *Client) fencedDelete(ctx context.Context, ri dynamic.ResourceInterface, name, what string, epoch *uint64, check func(*unstructured.Unstructured) error) error {
	if epoch == nil {
		err := c.remove(ctx, ri, name, metav1.DeleteOptions{})
		if err == nil || isGone(err) {
			return nil
		}
		return classify(err, "delete "+what)
	}
	for attempt := 1; ; attempt++ {
		obj, err := c.get(ctx, ri, name)
		if isGone(err) {
			return nil
		}
		if err != nil {
			return classify(err, "read "+what)
		}
		if err := check(obj); err != nil {
			return err
		}
		rv := obj.GetResourceVersion()
		if rv == "" {
			return fmt.Errorf("delete %s: the read carries no resourceVersion; refusing an unconditional DELETE", what)
		}
		err = c.remove(ctx, ri, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
		switch {
		case err == nil || isGone(err):
			return nil
		case !apierrors.IsConflict(err):
			return classify(err, "delete "+what)
		case attempt == maxAttempts:
			return fmt.Errorf("delete %s: the object kept changing for %d attempts: %w", what, maxAttempts, classify(err, ""))
		}
	}
}

func ownedBy(obj *unstructured.Unstructured, uid types.UID) bool {
	for _, r := range obj.GetOwnerReferences() {
		if r.UID == uid {
			return true
		}
	}
	return false
}

// ApplyEgress writes the per-sandbox policy of in (contract §4.1): POST, on 409 a
// merge PATCH of the same full body, then a read-back that must equal what
// was written. The first call checks the fence is installed (CheckEgressFence).
func (c *Client) ApplyEgress(ctx context.Context, in PolicyInput) (*unstructured.Unstructured, error) {
	if in.LabelKey == "" {
		in.LabelKey = c.opts.LabelKey
	}
	policy, err := BuildPerSandboxPolicy(in)
	if err != nil {
		return nil, err
	}
	if err := c.CheckEgressFence(ctx); err != nil {
		return nil, err
	}
	what := "CiliumNetworkPolicy " + in.Namespace + "/" + policy.GetName()
	policies := c.dyn.Resource(CiliumNetworkPolicyGVR).Namespace(in.Namespace)
	_, err = c.create(ctx, policies, policy)
	if apierrors.IsAlreadyExists(err) {
		body, merr := json.Marshal(policy.Object)
		if merr != nil {
			return nil, merr
		}
		_, err = c.patch(ctx, policies, policy.GetName(), types.MergePatchType, body)
	}
	if err != nil {
		return nil, classify(err, "write "+what)
	}
	stored, err := c.get(ctx, policies, policy.GetName())
	if err != nil {
		return nil, classify(err, "read back "+what)
	}
	if diff := writtenDiff(policy, stored); diff != "" {
		return nil, fmt.Errorf("%s: %w; something mutated it (-written +stored):\n%s", what, ErrReadBackMismatch, diff)
	}
	return stored, nil
}

// writtenDiff compares the fields the host wrote; the server owns the rest
// of metadata.
func writtenDiff(written, stored *unstructured.Unstructured) string {
	pick := func(u *unstructured.Unstructured) map[string]any {
		refs, _, _ := unstructured.NestedFieldNoCopy(u.Object, "metadata", "ownerReferences")
		return jsonRoundTrip(map[string]any{"spec": u.Object["spec"], "specs": u.Object["specs"], "ownerReferences": refs})
	}
	return cmp.Diff(pick(written), pick(stored))
}

// jsonRoundTrip normalises numbers and typed values so that equal JSON
// compares equal.
func jsonRoundTrip(v any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		return map[string]any{"unmarshalable": err.Error()}
	}
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}

// RemoveEgress deletes the per-sandbox policy of an owner uid; a policy
// already gone counts as removed.
//
// The TypeScript host sends a bodyless DELETE. client-go's
// dynamic client always sends a DeleteOptions body, so this one carries
// {"kind":"DeleteOptions","apiVersion":"v1"} with no option set, which the
// API server reads exactly as no body (the fence matches on the name only).
func (c *Client) RemoveEgress(ctx context.Context, namespace, ownerUID string) error {
	err := c.remove(ctx, c.dyn.Resource(CiliumNetworkPolicyGVR).Namespace(namespace), PolicyName(ownerUID), metav1.DeleteOptions{})
	if err == nil || isGone(err) {
		return nil
	}
	return classify(err, "delete CiliumNetworkPolicy "+namespace+"/"+PolicyName(ownerUID))
}

// CheckEgressFence GETs the egress ValidatingAdmissionPolicy and its binding
// by name and fails with ErrFenceNotInstalled when either is missing (404) or
// unreadable (403): without the fence, a per-sandbox policy would be the only
// thing standing between a sandbox and the whole internet (contract §4.1). A
// success is remembered for the life of the Client.
func (c *Client) CheckEgressFence(ctx context.Context) error {
	if c.fenceExists.Load() {
		return nil
	}
	check := func(kind string, gvrName string, get func() error) error {
		err := get()
		switch {
		case err == nil:
			return nil
		case apierrors.IsNotFound(err):
			return fmt.Errorf("%w: %s %q is missing; install sandbox-fence (or set Options.EgressPolicyName/EgressBindingName to the installed names)", ErrFenceNotInstalled, kind, gvrName)
		case apierrors.IsForbidden(err):
			return fmt.Errorf("%w: %s %q is unreadable; grant this identity get on validatingadmissionpolicies and validatingadmissionpolicybindings (contract §6): %w", ErrFenceNotInstalled, kind, gvrName, err)
		}
		return classify(err, "read "+kind+" "+gvrName)
	}
	if err := check("ValidatingAdmissionPolicy", c.opts.EgressPolicyName, func() error {
		_, err := c.get(ctx, c.dyn.Resource(validatingAdmissionPolicyGVR), c.opts.EgressPolicyName)
		return err
	}); err != nil {
		return err
	}
	if err := check("ValidatingAdmissionPolicyBinding", c.opts.EgressBindingName, func() error {
		_, err := c.get(ctx, c.dyn.Resource(validatingAdmissionPolicyBindingGVR), c.opts.EgressBindingName)
		return err
	}); err != nil {
		return err
	}
	c.fenceExists.Store(true)
	return nil
}

func isGone(err error) bool { return apierrors.IsNotFound(err) || apierrors.IsGone(err) }

// classify maps an API error to the package's error kinds: an
// admission denial (any code; upstream policies deny with 403) becomes an
// *AdmissionDeniedError, a 422 without one ErrPatchNotApplied, 409
// ErrConflict, 404/410 ErrGone. The API error stays wrapped.
func classify(err error, what string) error {
	prefix := what
	if prefix != "" {
		prefix += ": "
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		s := status.Status()
		if denial, ok := ParseAdmissionDenial(s.Message); ok {
			denial.Code, denial.Err = s.Code, err
			return &denial
		}
	}
	switch {
	case apierrors.IsInvalid(err):
		return fmt.Errorf("%s%w: %w", prefix, ErrPatchNotApplied, err)
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
		return fmt.Errorf("%s%w: %w", prefix, ErrConflict, err)
	case isGone(err):
		return fmt.Errorf("%s%w: %w", prefix, ErrGone, err)
	}
	return fmt.Errorf("%s%w", prefix, err)
}
