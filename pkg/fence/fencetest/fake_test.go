package fencetest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence/fencetest"
)

// suspendAll is host code under test: it suspends each workspace and stops
// at the first one another host took over.
func suspendAll(ctx context.Context, c fence.Interface, names []string, epoch uint64) (int, error) {
	for i, n := range names {
		if _, err := c.Suspend(ctx, "ns", n, ptr.To(epoch)); err != nil {
			return i, err
		}
	}
	return len(names), nil
}

func TestAHostTestSeesTheCallsAndTheInjectedRefusal(t *testing.T) {
	f := &fencetest.Fake{SuspendFunc: func(_, name string, _ *uint64) (*unstructured.Unstructured, error) {
		if name == "b" {
			return nil, &fence.StaleEpochError{Object: "sandbox ns/b", Stored: 9, Held: 7}
		}
		return nil, nil
	}}
	done, err := suspendAll(context.Background(), f, []string{"a", "b", "c"}, 7)
	if done != 1 || !errors.Is(err, fence.ErrStaleEpoch) {
		t.Fatalf("suspendAll = %d, %v; want 1 and an ErrStaleEpoch", done, err)
	}
	want := []fencetest.Call{
		{Method: "Suspend", Args: []any{"ns", "a", ptr.To[uint64](7)}},
		{Method: "Suspend", Args: []any{"ns", "b", ptr.To[uint64](7)}},
	}
	if diff := cmp.Diff(want, f.Calls()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

func TestTheZeroFakeAnswersEveryMethodWithSuccess(t *testing.T) {
	var f fencetest.Fake
	ctx := context.Background()
	var c fence.Interface = &f
	if _, err := c.Stamp(ctx, "ns", "a", ptr.To[uint64](1)); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, "ns", "a", nil); err != nil {
		t.Fatal(err)
	}
	if err := c.CheckEgressFence(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(f.Calls()); got != 3 {
		t.Errorf("recorded %d calls, want 3", got)
	}
}
