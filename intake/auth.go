package intake

import (
	"context"
	"time"
)

// boundedContext is ctx bounded by timeout from now and by deadline, unless
// it is zero.
func boundedContext(ctx context.Context, timeout time.Duration, deadline time.Time) (context.Context, context.CancelFunc) {
	d := time.Now().Add(timeout)
	if !deadline.IsZero() && deadline.Before(d) {
		d = deadline
	}
	return context.WithDeadline(ctx, d)
}
