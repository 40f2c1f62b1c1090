package projector_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tally/internal/testenv"
	"tally/ledger"
	"tally/stream"
)

// A batch that takes longer than MinIdle to apply: the projector's own
// claim passes over its entries while it applies them and leaves them
// there (one delivery each, I2 without leaning on the ledger), and the
// batch is applied once: every entry handed to Append once, recorded
// once, none duplicate, none claimed. finish checks I1-I3. With a
// MinIdle of a second or more the claim names to Redis only the entries
// held for half of it, as those of the slow batch are.
func TestClaimSkipsEntriesInFlight(t *testing.T) {
	t.Parallel()
	for _, minIdle := range []time.Duration{100 * time.Millisecond, time.Second} {
		t.Run(minIdle.String(), func(t *testing.T) {
			t.Parallel()
			claimSkipsEntriesInFlight(t, minIdle)
		})
	}
}

func claimSkipsEntriesInFlight(t *testing.T, minIdle time.Duration) {
	b := setup(t)
	b.poll("lunch", "pizza", "sushi")
	const n = 30
	var handed atomic.Int64 // events handed to Append
	var first sync.Once
	inApply, release := make(chan struct{}), make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce) // the applier is not left waiting when the test stops early
	app := applierFunc(func(ctx context.Context, events []ledger.Event) ([]ledger.Outcome, error) {
		handed.Add(int64(len(events)))
		first.Do(func() {
			close(inApply)
			<-release
		})
		return b.store.Append(ctx, events)
	})
	b.enqueue(votes("u", n, "lunch", "pizza", "sushi")...)
	cfg := fast("p1")
	cfg.Workers = 1 // the n entries in one batch
	cfg.MinIdle = minIdle
	cfg.ClaimInterval = 20 * time.Millisecond
	r := b.start(app, cfg)
	select {
	case <-inApply:
	case <-time.After(10 * time.Second):
		t.Fatal("no batch was applied within 10s")
	}

	// Each entry held becomes idle for longer than MinIdle; a claim pass
	// then finds it, and leaves it here (its idle time starts again, its
	// delivery count stays 1) rather than delivering it a second time.
	s := b.keys.Stream(0)
	longest := map[string]time.Duration{} // id -> longest idle time seen
	passed := map[string]bool{}           // ids a claim pass went over
	testenv.Eventually(b.t, 10*time.Second, "a claim pass to go over the entries in flight", func() bool {
		ps, err := b.rdb.XPendingExt(b.ctx, &redis.XPendingExtArgs{Stream: s, Group: stream.Group, Start: "-", End: "+", Count: 2 * n}).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(ps) != n {
			t.Fatalf("%d entries pending while the batch is applied, want %d", len(ps), n)
		}
		for _, pe := range ps {
			if pe.RetryCount > 1 || pe.Consumer != cfg.Consumer {
				t.Fatalf("entry %s delivered %d times, now to %s, while %s applies it: its own claim took it back", pe.ID, pe.RetryCount, pe.Consumer, cfg.Consumer)
			}
			// Idle time that fell went back to 0 at a claim pass: nothing
			// else touches an entry in flight, and the pass takes only
			// entries idle for MinIdle, so it fell from MinIdle or more,
			// though a slow poll may have last seen it below that.
			if longest[pe.ID] >= cfg.MinIdle/2 && pe.Idle < longest[pe.ID] {
				passed[pe.ID] = true
			}
			longest[pe.ID] = max(longest[pe.ID], pe.Idle)
		}
		return len(passed) == n
	})
	releaseOnce()
	b.waitDrained(20 * time.Second)
	if got := handed.Load(); got != n {
		t.Errorf("%d events handed to Append, want %d: each entry applied once", got, n)
	}
	if got := r.metric("tally_projector_events_total", "outcome", "recorded"); got != n {
		t.Errorf("recorded metric %v, want %d", got, n)
	}
	if got := r.metric("tally_projector_events_total", "outcome", "duplicate"); got != 0 {
		t.Errorf("duplicate metric %v, want 0: an entry was applied again after its commit", got)
	}
	if got := r.metric("tally_projector_claimed_total"); got != 0 {
		t.Errorf("claimed metric %v, want 0: nothing was left by another consumer", got)
	}
}

// An entry deleted from its stream while this projector applies it is
// not lost: the claim pass that finds it deleted leaves it to the
// projector, which holds its fields and records it, and writes no
// tombstone. finish checks that every entry is recorded once (and not
// also dead-lettered).
func TestDeletedWhileInFlightNotLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll("lunch", "pizza", "sushi")
	const n = 10
	var first sync.Once
	inApply, release := make(chan struct{}), make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce)
	app := applierFunc(func(ctx context.Context, events []ledger.Event) ([]ledger.Outcome, error) {
		first.Do(func() {
			close(inApply)
			<-release
		})
		return b.store.Append(ctx, events)
	})
	b.enqueue(votes("u", n, "lunch", "pizza", "sushi")...)
	cfg := fast("p1")
	cfg.Workers = 1
	cfg.MinIdle = 100 * time.Millisecond
	cfg.ClaimInterval = 20 * time.Millisecond
	r := b.start(app, cfg)
	select {
	case <-inApply:
	case <-time.After(10 * time.Second):
		t.Fatal("no batch was applied within 10s")
	}
	s := b.keys.Stream(0)
	xs, err := b.rdb.XRange(b.ctx, s, "-", "+").Result()
	if err != nil || len(xs) != n {
		t.Fatalf("the stream holds %d entries (%v), want %d", len(xs), err, n)
	}
	ids := make([]string, len(xs))
	for i, x := range xs {
		ids[i] = x.ID
	}
	if err := b.rdb.XDel(b.ctx, s, ids...).Err(); err != nil {
		t.Fatal(err)
	}
	// A claim pass finds them deleted and drops them from the pending list.
	testenv.Eventually(b.t, 10*time.Second, "a claim pass to go over the deleted entries", func() bool { return b.pending("") == 0 })
	releaseOnce()
	testenv.Eventually(b.t, 10*time.Second, "the batch to be recorded", func() bool { return b.ledgerRows() == n })
	b.finish() // stops the projector once it applied all it held, tombstones included
	if got := r.metric("tally_projector_lost_total"); got != 0 {
		t.Errorf("lost metric %v, want 0: the projector held the entries", got)
	}
	if ds := b.deadLetters(); len(ds) != 0 {
		t.Errorf("%d tombstones (the first: %s, %s) for entries the projector held and recorded", len(ds), ds[0].Reason, ds[0].Error)
	}
}
