package main

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/sandbox-fence/sandbox-fence/internal/webhook"
)

// countingSink counts what the broadcaster sends to the API server.
type countingSink struct {
	mu    sync.Mutex
	byKey map[string]int
}

func (s *countingSink) add(e *corev1.Event) (*corev1.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byKey[e.Namespace]++
	return e, nil
}

func (s *countingSink) Create(e *corev1.Event) (*corev1.Event, error)          { return s.add(e) }
func (s *countingSink) Update(e *corev1.Event) (*corev1.Event, error)          { return s.add(e) }
func (s *countingSink) Patch(e *corev1.Event, _ []byte) (*corev1.Event, error) { return s.add(e) }

func (s *countingSink) count(ns string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byKey[ns]
}

// TestEventsAreRateLimitedPerNamespace sends 60 refusals of distinct
// policies in one namespace and 1 in another: the first namespace gets the
// burst and no more, the other is not starved by it.
func TestEventsAreRateLimitedPerNamespace(t *testing.T) {
	sink := &countingSink{byKey: map[string]int{}}
	b := newEventBroadcaster()
	defer b.Shutdown()
	b.StartRecordingToSink(sink)
	rec := b.NewRecorder(runtime.NewScheme(), corev1.EventSource{Component: "sandbox-fence-webhook"})
	for i := range 60 {
		ref := &corev1.ObjectReference{APIVersion: "cilium.io/v2", Kind: "CiliumNetworkPolicy", Namespace: "flood", Name: fmt.Sprintf("namzu-sbx-%d", i)}
		rec.Event(ref, corev1.EventTypeWarning, webhook.ReasonDenied, fmt.Sprintf("refusal %d", i))
	}
	rec.Event(&corev1.ObjectReference{APIVersion: "cilium.io/v2", Kind: "CiliumNetworkPolicy", Namespace: "quiet", Name: "namzu-sbx-q"}, corev1.EventTypeWarning, webhook.ReasonDenied, "refusal")
	// Events are sent asynchronously: wait for the quiet namespace's, sent
	// after the flood, then for the flood to settle.
	if err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return sink.count("quiet") == 1 && sink.count("flood") >= eventBurst, nil
	}); err != nil {
		t.Fatalf("sent %d Events in flood and %d in quiet: %v", sink.count("flood"), sink.count("quiet"), err)
	}
	if got := sink.count("flood"); got != eventBurst {
		t.Errorf("the flooded namespace got %d Events, want the burst of %d", got, eventBurst)
	}
}
