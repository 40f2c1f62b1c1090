package pause

import (
	"context"
	"testing"
	"time"
)

// TestFor: a wait ends after d with true, at once with false when the
// context ends first, and a wait of zero or less reports only whether the
// context is live.
func TestFor(t *testing.T) {
	t.Parallel()
	live := context.Background()
	done, cancel := context.WithCancel(live)
	cancel()
	start := time.Now()
	if !For(live, 20*time.Millisecond) || time.Since(start) < 20*time.Millisecond {
		t.Errorf("For(live, 20ms) returned false or before 20ms (%s)", time.Since(start))
	}
	start = time.Now()
	if For(done, time.Hour) || time.Since(start) > time.Second {
		t.Errorf("For(done, 1h) returned true or took %s", time.Since(start))
	}
	for _, d := range []time.Duration{0, -time.Second} {
		if !For(live, d) || For(done, d) {
			t.Errorf("For(ctx, %s): want true for a live context, false for one done", d)
		}
	}
}
