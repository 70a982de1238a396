package webhook_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/sandbox-fence/sandbox-fence/internal/admit"
	"github.com/sandbox-fence/sandbox-fence/internal/webhook"
)

// A cache admits only while its watch is open, holds what it was opened
// from, and was heard from (an event or a bookmark) within MaxSilence.
func TestOwnerCacheIsFreshOnlyWhileItsWatchIsOpenAndHeardFrom(t *testing.T) {
	kind := admit.ClaimOwner.GVK.Kind
	bookmark := func(initialEnd bool) watch.Event {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(admit.ClaimOwner.GVK)
		if initialEnd {
			u.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
		}
		return watch.Event{Type: watch.Bookmark, Object: u}
	}
	added := func() watch.Event {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(admit.ClaimOwner.GVK)
		return watch.Event{Type: watch.Added, Object: u}
	}
	streaming := metav1.ListOptions{SendInitialEvents: new(true)}
	type step struct {
		// One of: list, watch (opts), send (event), stop (the watch of that
		// index ends), wait.
		list  bool
		watch *metav1.ListOptions
		send  *watch.Event
		stop  int
		wait  time.Duration
		fresh bool
	}
	watchAfterList := metav1.ListOptions{}
	ev := func(e watch.Event) *watch.Event { return &e }
	cases := []struct {
		name  string
		steps []step
	}{{
		name:  "before any watch it is not fresh",
		steps: []step{{fresh: false}},
	}, {
		name:  "a watch after a list is fresh at once",
		steps: []step{{list: true, fresh: false}, {watch: &watchAfterList, fresh: true}},
	}, {
		name: "a streamed watch is fresh only from the bookmark that ends its initial events",
		steps: []step{
			{watch: &streaming, fresh: false},
			{send: ev(added()), fresh: false},
			{send: ev(bookmark(false)), fresh: false},
			{send: ev(bookmark(true)), fresh: true},
		},
	}, {
		name: "a watch that ends is not fresh until the next one opens",
		steps: []step{
			{list: true}, {watch: &watchAfterList, fresh: true},
			{stop: 1, fresh: false},
			{watch: &watchAfterList, fresh: true},
		},
	}, {
		name: "a relist makes it not fresh until the watch after it opens",
		steps: []step{
			{watch: &watchAfterList, fresh: true},
			{list: true, fresh: false},
			{watch: &watchAfterList, fresh: true},
		},
	}, {
		name: "the end of a watch already replaced does not close its successor",
		steps: []step{
			{watch: &watchAfterList, fresh: true},
			{watch: &watchAfterList, fresh: true},
			{stop: 1, fresh: true},
		},
	}, {
		name: "a watch silent past MaxSilence is not fresh, and a bookmark makes it fresh again",
		steps: []step{
			{watch: &watchAfterList, fresh: true},
			{wait: 50 * time.Second, fresh: true},
			{wait: 30 * time.Second, fresh: false},
			{send: ev(bookmark(false)), fresh: true},
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1e9, 0)
			h := &webhook.WatchHealth{MaxSilence: time.Minute, Now: func() time.Time { return now }}
			var watches []*watch.FakeWatcher
			lw := &toolscache.ListWatch{
				ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
					return &unstructured.UnstructuredList{}, nil
				},
				WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
					w := watch.NewFakeWithChanSize(8, false)
					watches = append(watches, w)
					return w, nil
				},
			}
			// Driven as client-go's reflector drives it.
			olw := h.Observe(kind, lw)
			var outs []<-chan watch.Event
			for i, s := range tc.steps {
				switch {
				case s.list:
					if _, err := olw.ListWithContext(context.Background(), metav1.ListOptions{}); err != nil {
						t.Fatal(err)
					}
				case s.watch != nil:
					w, err := olw.WatchWithContext(context.Background(), *s.watch)
					if err != nil {
						t.Fatal(err)
					}
					outs = append(outs, w.ResultChan())
				case s.send != nil:
					watches[len(watches)-1].Action(s.send.Type, s.send.Object)
					<-outs[len(outs)-1] // observed before it is forwarded
				case s.stop > 0:
					watches[s.stop-1].Stop()
					for range outs[s.stop-1] { // the forwarder has seen the end
					}
				case s.wait > 0:
					now = now.Add(s.wait)
				}
				if err := h.Fresh(kind); (err == nil) != s.fresh {
					t.Fatalf("step %d: Fresh = %v, want fresh %t", i, err, s.fresh)
				}
			}
		})
	}
}
