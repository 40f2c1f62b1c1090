package loadtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sethvargo/go-retry"
)

// errNotDrained marks a queue read that found entries left.
var errNotDrained = errors.New("the queue is not drained")

// Drain waits until the queue is empty (no entry in the streams, none
// pending) or Config.DrainTimeout has passed, reading it from every 20ms
// up to every 250ms. A timeout is not an error: Verify reports it.
// Without a Queue it returns at once.
func (s *Session) Drain(ctx context.Context) error {
	s.phase.Store("draining")
	start := time.Now()
	defer func() { s.drainTime = time.Since(start) }()
	if s.queue == nil {
		s.drained = true
		return nil
	}
	stopProgress := s.startProgress(ctx)
	defer stopProgress()
	b := retry.WithMaxDuration(s.cfg.DrainTimeout,
		retry.WithCappedDuration(250*time.Millisecond, retry.NewExponential(20*time.Millisecond)))
	err := retry.Do(ctx, b, func(ctx context.Context) error {
		if s.readDrained(ctx) {
			return nil
		}
		return retry.RetryableError(errNotDrained)
	})
	if errors.Is(err, errNotDrained) {
		s.log.LogAttrs(ctx, slog.LevelWarn, "the queue did not drain in time", slog.String("state", s.drainErr))
		return nil
	}
	return err
}

// readDrained reads the queue once and reports whether it is drained;
// otherwise drainErr says what is left.
func (s *Session) readDrained(ctx context.Context) bool {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	st, err := s.queue.Status(qctx)
	cancel()
	switch {
	case err == nil && st.Drained():
		s.drained = true
		s.drainErr = ""
		s.deadAfter = st.DeadLetters
		return true
	case err != nil:
		s.drainErr = "the queue could not be read: " + err.Error()
	default:
		s.drainErr = fmt.Sprintf("%d entries still in the streams, %d pending", st.Backlog, st.Pending)
		s.deadAfter = st.DeadLetters
	}
	return false
}
