package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
)

// servedAPIs is a discovery whose served kinds a test changes while the
// webhook polls it.
type servedAPIs struct {
	*fakediscovery.FakeDiscovery
	mu    sync.Mutex
	kinds map[schema.GroupVersionKind]bool
}

func newServedAPIs(gvks ...schema.GroupVersionKind) *servedAPIs {
	s := &servedAPIs{FakeDiscovery: &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}, kinds: map[schema.GroupVersionKind]bool{}}
	for _, gvk := range gvks {
		s.kinds[gvk] = true
	}
	return s
}

func (s *servedAPIs) serve(gvk schema.GroupVersionKind) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kinds[gvk] = true
}

func (s *servedAPIs) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	s.mu.Lock()
	list := &metav1.APIResourceList{GroupVersion: gv}
	for gvk := range s.kinds {
		if gvk.GroupVersion().String() == gv {
			list.APIResources = append(list.APIResources, metav1.APIResource{Kind: gvk.Kind})
		}
	}
	s.mu.Unlock()
	if len(list.APIResources) == 0 {
		return s.FakeDiscovery.ServerResourcesForGroupVersion(gv) // its 404
	}
	return list, nil
}

func prerequisiteKinds() []schema.GroupVersionKind {
	var out []schema.GroupVersionKind
	for _, p := range prerequisites {
		out = append(out, p.gvk)
	}
	return out
}

func TestMissingAPIsNamesEachKindNotServedAndWhatInstallsIt(t *testing.T) {
	all := prerequisiteKinds()
	cases := []struct {
		name   string
		served []schema.GroupVersionKind
		want   []string
	}{
		{"every kind served: nothing missing", all, nil},
		{"agent-sandbox not installed: both of its kinds", all[2:], []string{
			"Sandbox agents.x-k8s.io/v1beta1 (agent-sandbox)",
			"SandboxClaim extensions.agents.x-k8s.io/v1beta1 (agent-sandbox's extensions)",
		}},
		{"cilium.io/v2 served without CiliumNetworkPolicy: that kind", append(all[:3:3], schema.GroupVersionKind{Group: "cilium.io", Version: "v2", Kind: "CiliumEndpoint"}), []string{
			"CiliumNetworkPolicy cilium.io/v2 (Cilium)",
		}},
		{"nothing installed: all four", nil, []string{
			"Sandbox agents.x-k8s.io/v1beta1 (agent-sandbox)",
			"SandboxClaim extensions.agents.x-k8s.io/v1beta1 (agent-sandbox's extensions)",
			"FenceConfig fence.sandbox.namzu.ai/v1alpha1 (sandbox-fence (config/crd))",
			"CiliumNetworkPolicy cilium.io/v2 (Cilium)",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := missingAPIs(newServedAPIs(tc.served...))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("missing (-want +got):\n%s", diff)
			}
		})
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func probe(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Without the agent-sandbox CRDs the webhook neither exits (a crash loop
// behind a fail-closed webhook) nor reports ready: it serves /healthz, a
// /readyz that names what is missing, records an Event on its pod, and
// starts once the kinds are served.
func TestTheWebhookWaitsForMissingCRDsAliveAndNotReady(t *testing.T) {
	defer func(d time.Duration) { prerequisitePoll = d }(prerequisitePoll)
	prerequisitePoll = 20 * time.Millisecond
	all := prerequisiteKinds()
	apis := newServedAPIs(all[2:]...)
	addr := freeAddr(t)
	events := record.NewFakeRecorder(10)
	pod := &corev1.ObjectReference{Kind: "Pod", Namespace: "sandbox-fence-system", Name: "sandbox-fence-webhook-abc"}
	done := make(chan error, 1)
	go func() { done <- waitForPrerequisites(context.Background(), apis, addr, pod, events, logr.Discard()) }()

	var code int
	var body string
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		code, body = probe(t, addr, "/readyz")
		return code != 0, nil
	}); err != nil {
		t.Fatalf("/readyz never answered: %s", body)
	}
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "Sandbox agents.x-k8s.io/v1beta1 (agent-sandbox), SandboxClaim") {
		t.Errorf("/readyz: %d %q, want 503 naming both agent-sandbox kinds", code, body)
	}
	if code, body := probe(t, addr, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %q, want 200: waiting is alive", code, body)
	}
	select {
	case e := <-events.Events:
		if !strings.HasPrefix(e, "Warning MissingPrerequisites the API server does not serve Sandbox") {
			t.Errorf("event %q", e)
		}
	case <-time.After(5 * time.Second):
		t.Error("no Event recorded")
	}
	select {
	case err := <-done:
		t.Fatalf("returned while the CRDs are missing: %v", err)
	default:
	}

	apis.serve(all[0])
	apis.serve(all[1])
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("still waiting 5 s after the CRDs were served")
	}
	// The probe address is free again for the manager's own server.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the probe address is still held: %v", err)
	}
	ln.Close()
	if len(events.Events) != 0 {
		t.Errorf("%d more Events, want one for the one condition", len(events.Events))
	}
}
