package webhook

import (
	"cmp"
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
	logf "sigs.k8s.io/controller-runtime/pkg/log"

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
	// Live reads straight from the API server (NewLiveReader).
	Live client.Reader
	// DropConnections closes Live's connections to the API server, so that
	// the next read dials a new one (NewLiveReader returns it). May be nil.
	DropConnections func()
	// AttemptTimeout bounds one live read; 0 means DefaultLiveAttemptTimeout.
	AttemptTimeout time.Duration
	// Metrics may be nil.
	Metrics *Metrics
	// CacheFirst lets the cache admit too (--owner-cache-first): a copy
	// with the expected uid and pod label and no deletionTimestamp is
	// taken as it is. Each of those facts is fixed or one-way once the
	// owner is seen: a uid never changes, a deletion never reverses, and a
	// bound host cannot change or remove the pod label (contract §4.9). So
	// the copy can only be behind by a deletion, whose policy the garbage
	// collector then deletes with the owner (docs/contract.md §4.4 states
	// that window). A miss, or a copy that does not vouch, waits up to
	// CacheWait for the informer before the live read.
	CacheFirst bool
	// CacheWait bounds that wait; 0 means DefaultCacheWait.
	CacheWait time.Duration
	// Fresh, when set, tells whether the cache of an owner kind is current
	// enough for CacheFirst (WatchHealth.Fresh). While it is not, owners are
	// read live as without CacheFirst, without the wait.
	Fresh func(kind string) error
}

// DefaultCacheWait is how long a CacheFirst lookup waits for the informer
// to see an owner before it reads it live. A host creates the owner and its
// policy back to back, so the policy usually arrives a few milliseconds
// before the owner's watch event.
const DefaultCacheWait = 50 * time.Millisecond

// cachePoll is how often a waiting CacheFirst lookup reads the cache again.
const cachePoll = 5 * time.Millisecond

var _ admit.OwnerLookup = (*CachedOwners)(nil)

func newOwnerObject(k admit.OwnerKind) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(k.GVK)
	return u
}

// GetOwner implements admit.OwnerLookup. Without CacheFirst the cache
// answers only what it cannot get wrong: an owner with this uid that is
// already being deleted (a deletion never reverses), which the rule
// refuses. Anything the rule would admit is read live. With CacheFirst (the
// binary's default) a copy that vouches for the owner admits as well, while
// Fresh says the cache is current. A miss, a cache error or another uid (an
// owner recreated under the same name) is read live.
func (l *CachedOwners) GetOwner(ctx context.Context, k admit.OwnerKind, namespace, name string, want admit.Expected) (*unstructured.Unstructured, error) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	if u, err := l.fromCache(ctx, k, key, want); err == nil {
		return u, nil
	} else if ctx.Err() != nil {
		return nil, withCtxErr(ctx, err)
	}
	u, err := l.liveGet(ctx, k, key)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, err
		}
		return nil, withCtxErr(ctx, err)
	}
	u.SetGroupVersionKind(k.GVK)
	return u, nil
}

// fromCache returns the cached copy of key when it settles the verdict: the
// expected uid and a deletionTimestamp (refused for good), or, with
// CacheFirst, the expected uid and pod label and no deletionTimestamp. Any
// other answer is an error (the cache's, or errCannotVouch), and the caller
// reads live.
func (l *CachedOwners) fromCache(ctx context.Context, k admit.OwnerKind, key types.NamespacedName, want admit.Expected) (*unstructured.Unstructured, error) {
	cacheFirst, stale := l.CacheFirst, false
	if cacheFirst && l.Fresh != nil {
		if err := l.Fresh(k.GVK.Kind); err != nil {
			cacheFirst, stale = false, true
			logf.FromContext(ctx).V(1).Info("owner cache not current; reading the owner live", "reason", err.Error())
		}
	}
	wait := time.Duration(0)
	if cacheFirst {
		wait = cmp.Or(l.CacheWait, DefaultCacheWait)
	}
	start := time.Now()
	for {
		u := newOwnerObject(k)
		err := l.Cache.Get(ctx, key, u)
		if err == nil && u.GetUID() == want.UID &&
			(u.GetDeletionTimestamp() != nil || cacheFirst && vouches(k, u, want)) {
			l.Metrics.lookup(k.GVK.Kind, "cache", "found", time.Since(start))
			u.SetGroupVersionKind(k.GVK)
			return u, nil
		}
		if time.Since(start)+cachePoll > wait || ctx.Err() != nil {
			result := lookupResult(err)
			if stale {
				result = "stale"
			}
			l.Metrics.lookup(k.GVK.Kind, "cache", result, time.Since(start))
			if err == nil {
				err = errCannotVouch
			}
			return nil, err
		}
		select {
		case <-ctx.Done():
		case <-time.After(cachePoll):
		}
	}
}

// errCannotVouch: the cached copy is there but cannot settle the verdict.
var errCannotVouch = errors.New("the cached owner cannot vouch for the write")

// vouches tells a cached owner that the rule would admit: the expected pod
// label (an owner without one is read live, as it may have just been set).
func vouches(k admit.OwnerKind, u *unstructured.Unstructured, want admit.Expected) bool {
	if want.LabelKey == "" {
		return false
	}
	got, ok := k.PodLabels(u)[want.LabelKey]
	return ok && got == want.LabelValue
}

// Live reads that found the API server unreachable are retried after
// liveRetryFirst, doubling up to liveRetryMax, while the request's lookup
// deadline allows.
const (
	liveRetryFirst = 25 * time.Millisecond
	liveRetryMax   = 400 * time.Millisecond
)

// DefaultLiveAttemptTimeout bounds one live read of an owner. A GET of one
// object answers in milliseconds; one that has not answered in a second is
// stuck on a connection that will not answer (see liveGet), and waiting
// longer only spends the lookup deadline (--lookup-timeout, 3 s).
const DefaultLiveAttemptTimeout = time.Second

// liveGet reads key from the API server, retrying while it cannot be
// reached and the lookup deadline has time left. A webhook pod's path to
// the API server can drop for about a second (on kind, after kube-apiserver
// restarted, a rolling restart refused 21 of 2846 valid policy writes with
// "dial tcp 10.96.0.1:443: connect: connection refused"); refusing a valid
// write for that would make the host retry what the webhook can.
//
// A read can also hang: on kind, after the same restart, one pod's GETs to
// 10.96.0.1 got no answer for the whole 3 s deadline, twice in a row, and
// two valid writes were refused (RELIABILITY.md finding 8). Over HTTP/2 every
// read shares one connection, so a retry on it would hang too. An attempt
// therefore ends after AttemptTimeout, and one that timed out drops Live's
// connections before the next, which dials afresh.
func (l *CachedOwners) liveGet(ctx context.Context, k admit.OwnerKind, key types.NamespacedName) (*unstructured.Unstructured, error) {
	attempt := l.AttemptTimeout
	if attempt <= 0 {
		attempt = DefaultLiveAttemptTimeout
	}
	var u *unstructured.Unstructured
	var err error
	attempts, begin := 0, time.Now()
	// Until ends when the read gets an answer or the deadline passes; the
	// caller words the last error (withCtxErr says it timed out).
	delays := wait.Backoff{Duration: liveRetryFirst, Factor: 2, Cap: liveRetryMax, Steps: math.MaxInt}.DelayFunc()
	defer func() {
		// Whether the retries saved the write, for RELIABILITY.md finding 8.
		if attempts > 1 {
			logf.FromContext(ctx).Info("live owner read retried", "kind", k.GVK.Kind, "namespace", key.Namespace, "name", key.Name,
				"attempts", attempts, "result", lookupResult(err), "after", time.Since(begin).Round(time.Millisecond))
		}
	}()
	_ = delays.Until(ctx, true, true, func(ctx context.Context) (bool, error) {
		attempts++
		u = newOwnerObject(k)
		actx, cancel := context.WithTimeout(ctx, attempt)
		defer cancel()
		start := time.Now()
		err = l.Live.Get(actx, key, u)
		l.Metrics.lookup(k.GVK.Kind, "live", lookupResult(err), time.Since(start))
		if err != nil && actx.Err() != nil && ctx.Err() == nil {
			// This attempt hung, the request has time left: start over on
			// a new connection.
			logf.FromContext(ctx).Info("live owner read got no answer; dropping the connections to the API server and retrying",
				"kind", k.GVK.Kind, "namespace", key.Namespace, "name", key.Name, "after", time.Since(start).Round(time.Millisecond))
			if l.DropConnections != nil {
				l.DropConnections()
			}
			return false, nil
		}
		return err == nil || !unreachable(err), nil
	})
	return u, err
}

// unreachable tells an API server that could not be reached, or asked to
// be retried, from an answer (not found, forbidden, invalid), which a retry
// would only repeat. A connection DropConnections closed under a read in
// flight ends it with "use of closed network connection" (an EOF) or
// "http2: client connection lost".
func unreachable(err error) bool {
	return utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) ||
		utilnet.IsHTTP2ConnectionLost(err) || apierrors.IsTooManyRequests(err) || apierrors.IsServiceUnavailable(err)
}

// OwnersLabelled implements admit.OwnerLookup from the cache only, through
// its PodLabelIndex: the uniqueness check is advisory by nature (a
// duplicate can be created right after the policy), so informer lag is
// acceptable there. The index makes it copy only the owners that share the
// label, not every owner of the namespace.
func (l *CachedOwners) OwnersLabelled(ctx context.Context, k admit.OwnerKind, namespace, key, value string) ([]unstructured.Unstructured, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(k.GVK.GroupVersion().WithKind(k.GVK.Kind + "List"))
	start := time.Now()
	err := l.Cache.List(ctx, list, client.InNamespace(namespace), client.MatchingFields{PodLabelIndex: admit.PodLabelPair(key, value)})
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
