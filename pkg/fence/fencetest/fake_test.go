package fencetest_test

import (
	"context"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence/fencetest"
)

func TestTheZeroFakeAnswersEveryMethodWithSuccess(t *testing.T) {
	var f fencetest.Fake
	ctx := context.Background()
	var c fence.Interface = &f
	if _, err := c.Stamp(ctx, "ns", "a", fence.WriteOptions{Epoch: ptr.To[uint64](1)}); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, "ns", "a", fence.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.CheckEgressFence(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(f.Calls()); got != 3 {
		t.Errorf("recorded %d calls, want 3", got)
	}
}
