package fencetest_test

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence/fencetest"
)

// suspendAll is host code under test: it suspends each workspace through a
// fence.Interface (a *fence.Client in production) and stops at the first one
// another host took over.
func suspendAll(ctx context.Context, c fence.Interface, names []string, epoch uint64) (int, error) {
	for i, n := range names {
		if _, err := c.Suspend(ctx, "work", n, fence.WriteOptions{Epoch: ptr.To(epoch)}); err != nil {
			return i, err
		}
	}
	return len(names), nil
}

// A host's unit test injects the refusal a take-over by another host causes
// and reads back what its code called.
func ExampleFake() {
	f := &fencetest.Fake{SuspendFunc: func(_, name string, opts fence.WriteOptions) (*unstructured.Unstructured, error) {
		if name == "b" {
			return nil, &fence.StaleEpochError{Object: "sandbox work/b", Stored: 9, Held: *opts.Epoch}
		}
		return nil, nil
	}}
	done, err := suspendAll(context.Background(), f, []string{"a", "b", "c"}, 7)
	fmt.Println(done, errors.Is(err, fence.ErrStaleEpoch))
	for _, c := range f.Calls() {
		fmt.Println(c.Method, c.Args[0], c.Args[1], *c.Args[2].(fence.WriteOptions).Epoch)
	}
	// Output:
	// 1 true
	// Suspend work a 7
	// Suspend work b 7
}
