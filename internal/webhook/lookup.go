package webhook

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fence/sandbox-fence/internal/admit"
)

// CachedOwners reads owners from an informer cache and confirms anything the
// cache cannot vouch for with a live GET. The host creates the claim (or
// Sandbox) and its policy back to back, so the cache routinely lags behind
// the policy write by a few milliseconds; refusing then would break the
// host's normal path.
type CachedOwners struct {
	// Cache is the informer-backed reader (the manager's cache).
	Cache client.Reader
	// Live reads straight from the API server (the manager's APIReader).
	Live client.Reader
	// Metrics may be nil.
	Metrics *Metrics
}

var _ admit.OwnerLookup = (*CachedOwners)(nil)

func newOwnerObject(k admit.OwnerKind) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(k.GVK)
	return u
}

// GetOwner implements admit.OwnerLookup. The cache answers only what it
// cannot get wrong: an owner with this uid that is already being deleted (a
// deletion never reverses), which the rule refuses. Anything the rule would
// admit is read live: the cache lags the API server, and an owner whose
// deletion began, or whose pod label went away, a moment ago must not be
// trusted from a stale copy (contract §4.4 items 1-2). A miss, a cache error
// or another uid (an owner recreated under the same name) is read live too.
func (l *CachedOwners) GetOwner(ctx context.Context, k admit.OwnerKind, namespace, name string, uid types.UID) (*unstructured.Unstructured, error) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	u := newOwnerObject(k)
	start := time.Now()
	err := l.Cache.Get(ctx, key, u)
	l.Metrics.lookup(k.GVK.Kind, "cache", lookupResult(err), time.Since(start))
	if err == nil && u.GetUID() == uid && u.GetDeletionTimestamp() != nil {
		u.SetGroupVersionKind(k.GVK)
		return u, nil
	}
	if ctx.Err() != nil {
		return nil, withCtxErr(ctx, err)
	}
	u, err = l.liveGet(ctx, k, key)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, err
		}
		return nil, withCtxErr(ctx, err)
	}
	u.SetGroupVersionKind(k.GVK)
	return u, nil
}

// Live reads that found the API server unreachable are retried after
// liveRetryFirst, doubling up to liveRetryMax, while the request's lookup
// deadline allows.
const (
	liveRetryFirst = 25 * time.Millisecond
	liveRetryMax   = 400 * time.Millisecond
)

// liveGet reads key from the API server, retrying while it cannot be
// reached and the lookup deadline has time left. A webhook pod's path to
// the API server can drop for about a second (on kind, after kube-apiserver
// restarted, a rolling restart refused 21 of 2846 valid policy writes with
// "dial tcp 10.96.0.1:443: connect: connection refused"); refusing a valid
// write for that would make the host retry what the webhook can.
func (l *CachedOwners) liveGet(ctx context.Context, k admit.OwnerKind, key types.NamespacedName) (*unstructured.Unstructured, error) {
	var u *unstructured.Unstructured
	var err error
	// Until ends when the read gets an answer or the deadline passes; the
	// caller words the last error (withCtxErr says it timed out).
	delays := wait.Backoff{Duration: liveRetryFirst, Factor: 2, Cap: liveRetryMax, Steps: math.MaxInt}.DelayFunc()
	_ = delays.Until(ctx, true, true, func(ctx context.Context) (bool, error) {
		u = newOwnerObject(k)
		start := time.Now()
		err = l.Live.Get(ctx, key, u)
		l.Metrics.lookup(k.GVK.Kind, "live", lookupResult(err), time.Since(start))
		return err == nil || !unreachable(err), nil
	})
	return u, err
}

// unreachable tells an API server that could not be reached, or asked to
// be retried, from an answer (not found, forbidden, invalid), which a retry
// would only repeat.
func unreachable(err error) bool {
	return utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) ||
		apierrors.IsTooManyRequests(err) || apierrors.IsServiceUnavailable(err)
}

// ListOwners implements admit.OwnerLookup from the cache only: the
// uniqueness check is advisory by nature (a duplicate can be created right
// after the policy), so informer lag is acceptable there.
func (l *CachedOwners) ListOwners(ctx context.Context, k admit.OwnerKind, namespace string) ([]unstructured.Unstructured, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(k.GVK.GroupVersion().WithKind(k.GVK.Kind + "List"))
	start := time.Now()
	err := l.Cache.List(ctx, list, client.InNamespace(namespace))
	l.Metrics.lookup(k.GVK.Kind, "cache-list", lookupResult(err), time.Since(start))
	if err != nil {
		return nil, withCtxErr(ctx, err)
	}
	return list.Items, nil
}

func lookupResult(err error) string {
	switch {
	case err == nil:
		return "found"
	case apierrors.IsNotFound(err):
		return "not_found"
	default:
		return "error"
	}
}

// withCtxErr makes an error caused by the request's deadline recognisable
// (errors.Is context.DeadlineExceeded) whatever the client wrapped it in, so
// the rule can say "timed out".
func withCtxErr(ctx context.Context, err error) error {
	ctxErr := ctx.Err()
	if ctxErr == nil || err == nil || errors.Is(err, ctxErr) {
		if err == nil {
			return ctxErr
		}
		return err
	}
	return fmt.Errorf("%w (%v)", ctxErr, err)
}
