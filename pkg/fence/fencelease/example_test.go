package fencelease_test

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence/fencelease"
)

// A host takes the workspaces of a Lease over and writes them with the
// epoch of its lead. A real host passes its clientset's CoordinationV1() and
// reads the workspaces the Lease guards with a GET each.
func ExampleTakeOver() {
	sandbox := &unstructured.Unstructured{} // as read: no holder epoch yet
	err := fencelease.TakeOver(context.Background(), fake.NewClientset().CoordinationV1(), fencelease.TakeOverOptions{
		LeaseNamespace:  "work",
		LeaseName:       "workspaces",
		IdentityPrefix:  "host-a",
		ReleaseOnCancel: true,
		StoredEpoch: func(context.Context) (uint64, error) {
			read := fence.ReadHolderEpoch(sandbox)
			if read.State == fence.EpochMalformed {
				return 0, fmt.Errorf("sandbox-1: malformed holder epoch %q", read.Raw)
			}
			return read.Epoch, nil
		},
		WhileLeading: func(ctx context.Context, epoch uint64) {
			// Stamp each workspace with &epoch first, then send &epoch on
			// every write until ctx is done.
			fmt.Println("leading with holder epoch", epoch)
		},
	})
	fmt.Println("take-over ended:", err)
	// Output:
	// leading with holder epoch 1
	// take-over ended: <nil>
}
