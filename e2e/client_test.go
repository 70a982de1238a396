//go:build e2e

package e2e

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// interleaved returns a fence.Client acting as id whose first request of
// method (PATCH, DELETE) is preceded by competitor: the other process's
// write lands between this client's gate read and its conditional write,
// deterministically. codes returns the status codes of the method's
// requests sent.
func interleaved(t *testing.T, id *framework.Identity, method string, competitor func() error) (c *fence.Client, codes func() []int) {
	t.Helper()
	cfg := rest.CopyConfig(id.Config)
	var (
		fired atomic.Bool
		mu    sync.Mutex
		sent  []int
	)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method != method {
				return rt.RoundTrip(r)
			}
			if fired.CompareAndSwap(false, true) {
				if err := competitor(); err != nil {
					t.Errorf("competing write: %v", err)
				}
			}
			resp, err := rt.RoundTrip(r)
			if err == nil {
				mu.Lock()
				sent = append(sent, resp.StatusCode)
				mu.Unlock()
			}
			return resp, err
		})
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return fence.NewClient(dyn, fence.Options{}), func() []int {
		mu.Lock()
		defer mu.Unlock()
		return append([]int(nil), sent...)
	}
}

func hostClient(t *testing.T) *fence.Client {
	t.Helper()
	return fence.NewClient(env.Host.Dynamic, fence.Options{})
}

// The host library's whole workspace life cycle, as the host identity, with
// nothing but the host's RBAC.
func TestHostLibraryLifeCycleAgainstTheFence(t *testing.T) {
	requirePolicy(t, framework.PolicyHolderEpoch)
	ctx := testContext(t)
	ns := env.HostNamespace
	c := hostClient(t)
	sbx := framework.MakeSandbox(ns, name("life")).Obj()
	n := sbx.GetName()
	t.Cleanup(func() {
		_ = env.Admin.Dynamic.Resource(framework.SandboxGVR).Namespace(ns).Delete(context.Background(), n, metav1.DeleteOptions{})
	})

	if _, err := c.CreateWorkspace(ctx, sbx, fence.WriteOptions{Epoch: new(uint64(1))}); err != nil {
		t.Fatalf("create at epoch 1: %v", err)
	}
	if _, err := c.Suspend(ctx, ns, n, fence.WriteOptions{Epoch: new(uint64(1))}); err != nil {
		t.Fatalf("suspend at epoch 1: %v", err)
	}
	if _, err := c.Resume(ctx, ns, n, fence.WriteOptions{Epoch: new(uint64(2))}); err != nil {
		t.Fatalf("resume at epoch 2 (a new holder): %v", err)
	}
	if _, err := c.Suspend(ctx, ns, n, fence.WriteOptions{Epoch: new(uint64(1))}); !errors.Is(err, fence.ErrStaleEpoch) {
		t.Fatalf("suspend by the old holder at epoch 1: want ErrStaleEpoch (refused before sending), got %v", err)
	}
	if _, err := c.Suspend(ctx, ns, n, fence.WriteOptions{}); err != nil {
		t.Fatalf("unfenced suspend of a fenced workspace: %v", err)
	}
	if _, err := c.Stamp(ctx, ns, n, fence.WriteOptions{Epoch: new(uint64(3))}); err != nil {
		t.Fatalf("stamp at epoch 3: %v", err)
	}
	if got := epochOf(t, ns, n); got != "3" {
		t.Errorf("stored epoch %q, want 3", got)
	}
	if err := c.Delete(ctx, ns, n, fence.WriteOptions{Epoch: new(uint64(3))}); err != nil {
		t.Fatalf("fenced delete at epoch 3: %v", err)
	}
}

// The race the epoch exists for: a new holder writes between the old
// holder's gate read and its patch. The server fails the old holder's test
// clause (422 without an admission message); the library re-reads, sees the
// higher epoch and stops. The stored epoch is the new holder's.
func TestStaleHolderLosesTheRaceOnTheServer(t *testing.T) {
	requirePolicy(t, framework.PolicyHolderEpoch)
	ctx := testContext(t)
	sbx := sandboxWithEpoch(t, "1")
	ns, n := sbx.GetNamespace(), sbx.GetName()
	newHolder := func() error {
		_, err := hostClient(t).Resume(ctx, ns, n, fence.WriteOptions{Epoch: new(uint64(2))})
		return err
	}
	c, _ := interleaved(t, env.Host, http.MethodPatch, newHolder)
	_, err := c.Suspend(ctx, ns, n, fence.WriteOptions{Epoch: new(uint64(1))})
	if !errors.Is(err, fence.ErrStaleEpoch) {
		t.Fatalf("old holder's suspend: want ErrStaleEpoch after the re-read, got %v", err)
	}
	if got := epochOf(t, ns, n); got != "2" {
		t.Errorf("stored epoch %q, want the new holder's 2", got)
	}
}

// An unfenced writer (a controller, an old host) between the read and the
// patch does not touch the epoch, so the fenced write's test clause still
// holds and it applies first time.
func TestUnfencedWriteBetweenReadAndPatchDoesNotBreakAFencedWrite(t *testing.T) {
	requirePolicy(t, framework.PolicyHolderEpoch)
	ctx := testContext(t)
	sbx := sandboxWithEpoch(t, "1")
	ns, n := sbx.GetNamespace(), sbx.GetName()
	unfenced := func() error {
		return patch(t, env.Operator, framework.SandboxGVR, ns, n, types.MergePatchType, []byte(`{"metadata":{"labels":{"touched":"yes"}}}`))
	}
	c, _ := interleaved(t, env.Host, http.MethodPatch, unfenced)
	if _, err := c.Suspend(ctx, ns, n, fence.WriteOptions{Epoch: new(uint64(1))}); err != nil {
		t.Fatalf("fenced suspend after an unfenced write: %v", err)
	}
	if got := epochOf(t, ns, n); got != "1" {
		t.Errorf("stored epoch %q, want 1", got)
	}
}

// On an object without annotations the test clause is the resourceVersion,
// which any write moves: the library must re-read and succeed on a retry.
func TestMigrationRetriesWhenTheObjectMovedUnderIt(t *testing.T) {
	requirePolicy(t, framework.PolicyHolderEpoch)
	ctx := testContext(t)
	sbx := sandboxWithEpoch(t, "")
	ns, n := sbx.GetNamespace(), sbx.GetName()
	unfenced := func() error {
		return patch(t, env.Operator, framework.SandboxGVR, ns, n, types.MergePatchType, []byte(`{"spec":{"operatingMode":"Running"},"metadata":{"labels":{"touched":"yes"}}}`))
	}
	c, _ := interleaved(t, env.Host, http.MethodPatch, unfenced)
	if _, err := c.Suspend(ctx, ns, n, fence.WriteOptions{Epoch: new(uint64(4))}); err != nil {
		t.Fatalf("first fenced write on an unannotated object after a concurrent write: %v", err)
	}
	if got := epochOf(t, ns, n); got != "4" {
		t.Errorf("stored epoch %q, want 4", got)
	}
}

// The host's per-sandbox egress through the library: it first reads the
// policy and binding (the host's ClusterRole lets it), then writes and
// reads back; teardown is garbage collection.
func TestHostLibraryWritesPerSandboxEgress(t *testing.T) {
	requireShipped(t)
	requirePolicy(t, framework.PolicyCiliumEgress)
	ctx := testContext(t)
	claim := hostClaim(t)
	c := hostClient(t)
	in := fence.PolicyInput{
		Owner:     fence.PolicyOwner{Kind: fence.OwnerKindSandboxClaim, Name: claim.GetName(), UID: string(claim.GetUID())},
		Namespace: env.HostNamespace,
		Hosts:     []string{"registry.npmjs.org", ".example.com"},
	}
	if _, err := c.ApplyEgress(ctx, in); err != nil {
		t.Fatalf("ApplyEgress: %v", err)
	}
	in.Hosts = append(in.Hosts, "api.example.org")
	if _, err := c.ApplyEgress(ctx, in); err != nil {
		t.Fatalf("ApplyEgress again with one more host (the 409 merge-patch path): %v", err)
	}
	if err := c.RemoveEgress(ctx, env.HostNamespace, string(claim.GetUID())); err != nil {
		t.Fatalf("RemoveEgress: %v", err)
	}
}
