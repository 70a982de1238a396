package webhook

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sandbox-fence/sandbox-fence/internal/admit"
)

// MaxWatchSilence is how long an owner informer's watch may go without an
// event or a bookmark before its cache stops admitting. The API server
// sends every watch that asks for bookmarks (controller-runtime's informers
// do) one about once a minute (k8s.io/apiserver's cacher,
// defaultBookmarkFrequency), so a quiet watch that is still connected is
// heard from well within this; 75 s is that minute plus the margin the API
// server allows itself (cacher.DefaultEventFreshDuration).
const MaxWatchSilence = 75 * time.Second

// WatchHealth tells whether the owner informers' caches are current enough
// to admit on (CachedOwners.Fresh): their watch is open, the cache holds
// what it was opened from, and an event or a bookmark arrived within
// MaxSilence. A watch that broke (an API server restart, a lost connection:
// client-go's HTTP/2 health check closes a dead one within 45 s) and is
// relisting, or one that went silent, makes the owner reads live until the
// new watch delivers. It observes the watches by wrapping the informers'
// ListerWatchers (NewInformer), so it sees bookmarks, which reach no event
// handler.
type WatchHealth struct {
	// MaxSilence is 0 for MaxWatchSilence.
	MaxSilence time.Duration
	// Now is time.Now when nil (tests set it).
	Now func() time.Time

	mu    sync.Mutex
	kinds map[string]*watchState
}

type watchState struct {
	// gen counts the watches opened; a closing watch that is no longer the
	// latest must not mark the current one closed.
	gen   int
	open  bool
	heard time.Time
}

// NewInformer is controller-runtime's cache.Options.NewInformer: the
// informer client-go builds by default, with the owner kinds' watches
// observed.
func (h *WatchHealth) NewInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	gvk := obj.GetObjectKind().GroupVersionKind()
	for _, k := range admit.OwnerKinds {
		if k.GVK == gvk {
			lw = h.Observe(gvk.Kind, lw)
		}
	}
	return toolscache.NewSharedIndexInformer(lw, obj, resync, indexers)
}

// ListerWatcher is what client-go's reflector calls, with and without a
// context.
type ListerWatcher interface {
	toolscache.ListerWatcher
	toolscache.ListerWatcherWithContext
}

// Observe returns lw with its lists and watches observed as kind's.
func (h *WatchHealth) Observe(kind string, lw toolscache.ListerWatcher) ListerWatcher {
	return &observedListerWatcher{ListerWatcherWithContext: toolscache.ToListerWatcherWithContext(lw), h: h, kind: kind}
}

// Fresh returns nil when kind's cache may admit, or why it may not.
func (h *WatchHealth) Fresh(kind string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.kinds[kind]
	switch {
	case s == nil || !s.open:
		return fmt.Errorf("the %s watch is not open (starting, or relisting after it broke)", kind)
	case h.now().Sub(s.heard) > h.maxSilence():
		return fmt.Errorf("the %s watch has been silent for %s, longer than the API server's bookmark interval allows", kind, h.now().Sub(s.heard).Round(time.Second))
	}
	return nil
}

func (h *WatchHealth) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

func (h *WatchHealth) maxSilence() time.Duration {
	if h.MaxSilence > 0 {
		return h.MaxSilence
	}
	return MaxWatchSilence
}

// update runs f on kind's state under the lock.
func (h *WatchHealth) update(kind string, f func(*watchState)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.kinds == nil {
		h.kinds = map[string]*watchState{}
	}
	if h.kinds[kind] == nil {
		h.kinds[kind] = &watchState{}
	}
	f(h.kinds[kind])
}

type observedListerWatcher struct {
	toolscache.ListerWatcherWithContext
	h    *WatchHealth
	kind string
}

// A List starts a relist: until the watch after it opens, the cache holds
// the old state.
func (o *observedListerWatcher) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	o.h.update(o.kind, func(s *watchState) { s.open = false })
	return o.ListerWatcherWithContext.ListWithContext(ctx, opts)
}

func (o *observedListerWatcher) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	var gen int
	// A watch that streams its initial state (client-go's WatchList) is
	// current only from the bookmark that ends that state; one that
	// follows a List is current from the start.
	streaming := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	o.h.update(o.kind, func(s *watchState) {
		s.gen++
		gen = s.gen
		s.open = false
	})
	w, err := o.ListerWatcherWithContext.WatchWithContext(ctx, opts)
	if err != nil {
		return nil, err
	}
	if !streaming {
		o.h.update(o.kind, func(s *watchState) { s.open, s.heard = true, o.h.now() })
	}
	ow := &observedWatch{inner: w, out: make(chan watch.Event), done: make(chan struct{})}
	go ow.forward(func(e watch.Event) {
		o.h.update(o.kind, func(s *watchState) {
			if s.gen != gen {
				return
			}
			s.heard = o.h.now()
			if streaming && !s.open && e.Type == watch.Bookmark && initialEventsEnd(e.Object) {
				s.open = true
			}
		})
	}, func() {
		o.h.update(o.kind, func(s *watchState) {
			if s.gen == gen && s.open {
				s.open = false
				// V(1): a watch also ends every 5-10 minutes by design.
				logf.FromContext(ctx).V(1).Info("owner watch closed; owners are read live until it reopens", "kind", o.kind)
			}
		})
	})
	return ow, nil
}

// List and Watch complete client-go's ListerWatcher; its reflector calls
// the context variants above.
func (o *observedListerWatcher) List(opts metav1.ListOptions) (runtime.Object, error) {
	return o.ListWithContext(context.Background(), opts)
}

func (o *observedListerWatcher) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return o.WatchWithContext(context.Background(), opts)
}

func initialEventsEnd(obj runtime.Object) bool {
	m, ok := obj.(metav1.Object)
	return ok && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true"
}

// observedWatch forwards a watch's events, telling each one (bookmarks
// included) and the end of the stream to its observer.
type observedWatch struct {
	inner    watch.Interface
	out      chan watch.Event
	done     chan struct{}
	stopOnce sync.Once
}

func (w *observedWatch) forward(seen func(watch.Event), closed func()) {
	defer close(w.out)
	defer closed()
	for e := range w.inner.ResultChan() {
		seen(e)
		select {
		case w.out <- e:
		case <-w.done:
			return
		}
	}
}

func (w *observedWatch) Stop() {
	w.stopOnce.Do(func() { close(w.done) })
	w.inner.Stop()
}

func (w *observedWatch) ResultChan() <-chan watch.Event { return w.out }
