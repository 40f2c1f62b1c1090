// Package pause owns the one wait that a context cuts short, shared by
// the client's retries (client), the load test's pacing
// (internal/loadtest) and the chaos test's faults (internal/chaos).
package pause

import (
	"context"
	"time"
)

// For waits d or until ctx is done, and reports whether it waited d. A d
// of zero or less does not wait: it reports whether ctx is still live.
func For(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
