package intake

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestPostgresTrialsBackOff: while PostgreSQL does not answer, the one
// lookup let through to try it comes after a wait as long as the outage
// so far (one second at first, then doubling, at most pgRetryMax); an
// answer ends the waits at once.
func TestPostgresTrialsBackOff(t *testing.T) {
	p := newPGState(slog.New(slog.DiscardHandler), prometheus.NewGauge(prometheus.GaugeOpts{Name: "reachable"}))
	ctx := context.Background()
	down := errors.New("connection refused")
	if p.skip(time.Now()) {
		t.Fatal("a lookup skipped before any failure")
	}
	p.observe(ctx, down)
	start := time.Unix(0, p.downSince.Load())
	// trial fails the trial let through at start+at (none skipped it
	// before) and reports when the next one is let through.
	trial := func(at time.Duration) time.Duration {
		t.Helper()
		now := start.Add(at)
		if !p.skip(now.Add(-time.Millisecond)) {
			t.Fatalf("a lookup let through %s after the outage began, before its wait ended", at-time.Millisecond)
		}
		if p.skip(now) {
			t.Fatalf("no lookup let through %s after the outage began", at)
		}
		if !p.skip(now) {
			t.Fatalf("two lookups let through %s after the outage began", at)
		}
		p.failedAt(down, now)
		return time.Duration(p.nextTry.Load() - start.UnixNano())
	}
	next := time.Duration(p.nextTry.Load() - start.UnixNano())
	if next < pgRetryEvery-10*time.Millisecond || next > pgRetryEvery+10*time.Millisecond {
		t.Fatalf("first trial %s after the failure, want %s", next, pgRetryEvery)
	}
	for _, want := range []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 26 * time.Second, 36 * time.Second} {
		if next = trial(next); next < want-10*time.Millisecond || next > want+10*time.Millisecond {
			t.Fatalf("next trial %s after the outage began, want %s", next, want)
		}
	}
	p.observe(ctx, nil)
	if p.skip(start.Add(next - time.Second)) {
		t.Fatal("a lookup skipped after PostgreSQL answered again")
	}
	p.observe(ctx, down)
	if after := time.Duration(p.nextTry.Load() - time.Now().UnixNano()); after > pgRetryEvery {
		t.Fatalf("the first trial of a new outage %s away, want at most %s", after, pgRetryEvery)
	}
}
