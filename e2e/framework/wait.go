package framework

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Eventually polls cond every interval until it returns true, an error, or
// timeout passes. It is the only way the suite waits: on an observable
// condition, never on a sleep. The last "not yet" reason is in the error.
func Eventually(ctx context.Context, timeout, interval time.Duration, what string, cond func(ctx context.Context) (done bool, reason string, err error)) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		done, reason, err := cond(ctx)
		last = reason
		return done, err
	})
	if err != nil {
		if last != "" {
			return fmt.Errorf("%s: %w (last: %s)", what, err, last)
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
