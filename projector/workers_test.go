package projector_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tally/internal/testenv"
	"tally/ledger"
	"tally/projector"
	"tally/stream"
)

// overlap wraps an Applier and records the most Append calls that ran at
// once. Until that reaches want, a call waits up to a second for the
// others to come in, so that a projector able to apply want batches at
// once shows it even when one batch applies faster than the next is
// handed over; after one such wait has timed out no call waits again.
type overlap struct {
	app       projector.Applier
	want      int64
	now, max  atomic.Int64
	gaveUp    atomic.Bool
	waitLimit time.Duration
}

func newOverlap(app projector.Applier, want int) *overlap {
	return &overlap{app: app, want: int64(want), waitLimit: time.Second}
}

func (o *overlap) Append(ctx context.Context, events []ledger.Event) ([]ledger.Outcome, error) {
	n := o.now.Add(1)
	defer o.now.Add(-1)
	for m := o.max.Load(); n > m && !o.max.CompareAndSwap(m, n); m = o.max.Load() {
	}
	if !o.gaveUp.Load() {
		deadline := time.Now().Add(o.waitLimit)
		for o.max.Load() < o.want && ctx.Err() == nil {
			if time.Now().After(deadline) {
				o.gaveUp.Store(true)
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	return o.app.Append(ctx, events)
}

// check fails the test unless exactly want calls ran at once at some
// point: more breaks the bound, fewer means the batches never overlapped.
func (o *overlap) check(t *testing.T) {
	t.Helper()
	if got := o.max.Load(); got != o.want {
		t.Errorf("at most %d Append calls ran at once, want exactly %d (more breaks the Workers bound; fewer, no overlap)", got, o.want)
	}
}

// With Workers at 1, 2 and 4, a backlog drains with exactly that many
// batches applied at once at the most.
func TestWorkersOverlapWithinBound(t *testing.T) {
	t.Parallel()
	for _, workers := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			t.Parallel()
			b := setup(t, withShards(2))
			b.poll("lunch", "pizza", "sushi")
			const n = 3000
			b.enqueue(votes("u", n, "lunch", "pizza", "sushi")...)
			o := newOverlap(b.store, workers)
			cfg := fast("p1")
			cfg.Workers = workers
			r := b.start(o, cfg)
			b.waitDrained(30 * time.Second)
			r.stop()
			o.check(t)
			if got := sum(b.tallies("lunch")); got != n {
				t.Errorf("total votes %d, want %d", got, n)
			}
			if got := r.metric("tally_projector_events_total", "outcome", "recorded"); got != n {
				t.Errorf("recorded metric %v, want %d", got, n)
			}
			if got := r.metric("tally_projector_batches_in_flight"); got != 0 {
				t.Errorf("in-flight gauge %v after the stop, want 0", got)
			}
		})
	}
}

// With Workers at 2, 3 and 4: a backlog with exact duplicates, entries a
// dead consumer left pending (half of them already committed), principals
// answering twice or reusing a key with another choice, poison entries,
// failures before commit and lost commit answers. Every entry ends
// acknowledged with the outcome the ledger gives it, the tallies equal
// the truth, and the batches overlapped within the bound.
func TestWorkersDrainBacklogWithFaults(t *testing.T) {
	t.Parallel()
	for _, workers := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			t.Parallel()
			b := setup(t, withShards(2))
			rng := rand.New(rand.NewPCG(uint64(workers), 7))
			const unique, repeats = 12_000, 1_500
			bl := b.enqueueBacklog(rng, 5, unique, repeats)

			// Conflicts the ledger decides by which commits first.
			const twice, reuse = 200, 200
			b.poll("contested", "a", "b")
			var contested []stream.Entry
			for i := range twice {
				p := fmt.Sprintf("twice%d", i)
				contested = append(contested, ballot(p, "k1", "contested", "a"), ballot(p, "k2", "contested", "b"))
			}
			for i := range reuse {
				p := fmt.Sprintf("reuse%d", i)
				contested = append(contested, ballot(p, "k1", "contested", "a"), ballot(p, "k1", "contested", "b"))
			}
			contested = append(contested, ballot("bomber1", "boom", "contested", "a"), ballot("bomber2", "boom", "contested", "b"))
			rng.Shuffle(len(contested), func(i, j int) { contested[i], contested[j] = contested[j], contested[i] })
			b.enqueue(contested...)
			entries := unique + repeats + len(contested)

			// A consumer read 1000 entries of shard 0 and died; it had
			// committed the first 500 without acknowledging them.
			const dead, committed = 1000, 500
			msgs := b.readAs("dead-consumer", dead)
			var events []ledger.Event
			for _, m := range msgs[:committed] {
				e, err := stream.Decode(m.Values)
				if err != nil {
					t.Fatal(err)
				}
				if e.ClientEventID != "boom" {
					events = append(events, e)
				}
			}
			if _, err := b.store.Append(b.ctx, events); err != nil {
				t.Fatal(err)
			}

			app, f := b.faulty(7, 9)
			o := newOverlap(app, workers)
			cfg := fast("p1")
			cfg.Workers = workers
			cfg.BatchSize = 200
			cfg.MinIdle = time.Second
			cfg.ClaimInterval = 100 * time.Millisecond
			cfg.BreakerFailures = 1000
			r := b.start(o, cfg)
			b.waitDrained(90 * time.Second)
			r.stop()

			bl.check(b)
			if got := sum(b.tallies("contested")); got != twice+reuse {
				t.Errorf("contested poll: %d votes, want %d, one per principal", got, twice+reuse)
			}
			if got := b.ledgerRows(); got != unique+twice+reuse {
				t.Errorf("%d ledger rows, want %d", got, unique+twice+reuse)
			}
			for reason, want := range map[ledger.Reason]int64{ledger.ReasonAlreadyResponded: twice, ledger.ReasonKeyReused: reuse} {
				var got int64
				if err := b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM poll_event_rejections WHERE reason = $1`, string(reason)).Scan(&got); err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("%d rejections %s, want %d", got, reason, want)
				}
			}
			ds := b.deadLetters()
			for _, d := range ds {
				if principal, k, _ := d.Original(); k != "boom" || (d.Reason != projector.ReasonFailed && d.Reason != projector.ReasonMaxDeliveries) {
					t.Errorf("unexpected dead letter: %s %s of %s/%s: %s", d.ID, d.Reason, principal, k, d.Error)
				}
			}
			if len(ds) != 2 {
				t.Errorf("%d dead letters, want the 2 poison entries", len(ds))
			}
			handled := r.metric("tally_projector_events_total")
			if handled < float64(entries) {
				t.Errorf("%v outcomes counted for %d entries acknowledged", handled, entries)
			}
			if got := r.metric("tally_projector_events_total", "outcome", "recorded"); got > unique+twice+reuse {
				t.Errorf("recorded metric %v, more than the %d ledger rows", got, unique+twice+reuse)
			}
			if got := r.metric("tally_projector_claimed_total"); got < dead {
				t.Errorf("claimed %v entries, want at least the %d the dead consumer left", got, dead)
			}
			f.check(t)
			o.check(t)
		})
	}
}

// stuckApplier blocks every Append until release is closed (or its
// context ends), then applies through the test's ledger; entered counts
// the calls that came in.
func (b *bundle) stuckApplier() (app projector.Applier, entered *atomic.Int64, release chan struct{}) {
	entered, release = new(atomic.Int64), make(chan struct{})
	return applierFunc(func(ctx context.Context, events []ledger.Event) ([]ledger.Outcome, error) {
		entered.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return b.store.Append(ctx, events)
	}), entered, release
}

// While every worker is stuck in the database, the projector holds no
// more than its workers' batches, the one it fills and one read: the
// readers wait instead of pulling the backlog into memory.
func TestWorkersBackPressure(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll("lunch", "pizza", "sushi")
	const n, batch, workers = 2000, 20, 3
	b.enqueue(votes("u", n, "lunch", "pizza", "sushi")...)
	app, entered, release := b.stuckApplier()
	cfg := fast("p1")
	cfg.Workers = workers
	cfg.BatchSize = batch
	cfg.MinIdle = time.Minute // no claim of its own entries while stuck
	cfg.ApplyTimeout = time.Minute
	r := b.start(app, cfg)
	testenv.Eventually(b.t, 10*time.Second, "every worker to take a batch", func() bool { return entered.Load() == workers })
	// The readers read until they run into the bound, then stop: wait
	// until what they hold has not changed for 300 ms. Without the bound
	// they would stop only with all n read, which the check below refuses.
	last, since := int64(-1), time.Now()
	testenv.Eventually(b.t, 30*time.Second, "the readers to stop reading", func() bool {
		if h := b.pending("p1"); h != last {
			last, since = h, time.Now()
		}
		return time.Since(since) >= 300*time.Millisecond
	})
	if got := entered.Load(); got != workers {
		t.Errorf("%d batches in flight, want %d", got, workers)
	}
	if got := r.metric("tally_projector_batches_in_flight"); got != workers {
		t.Errorf("in-flight gauge %v, want %d", got, workers)
	}
	// Per lane: the batch in flight, what is left over of the read that
	// filled it (under a read), and its mailbox (under a batch, plus one
	// read); and one read being split. A read is at most a batch.
	held, bound := b.pending("p1"), int64(workers*(batch+(batch-1)+(2*batch-1))+batch)
	if held < workers*batch || held > bound {
		t.Errorf("%d entries read while %d workers are stuck, want between %d and %d", held, workers, workers*batch, bound)
	}
	close(release)
	b.waitDrained(30 * time.Second)
	r.stop()
	if got := sum(b.tallies("lunch")); got != n {
		t.Errorf("total votes %d, want %d", got, n)
	}
}

// A stop waits for every batch in flight and applies the one being filled
// (within the shutdown grace); before Run returns, what committed is
// acknowledged and deleted, and nothing else is (I4).
func TestStopWaitsForEveryBatchInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll("lunch", "pizza", "sushi")
	const n, batch, workers = 200, 10, 3
	b.enqueue(votes("u", n, "lunch", "pizza", "sushi")...)
	app, entered, release := b.stuckApplier()
	cfg := fast("p1")
	cfg.Workers = workers
	cfg.BatchSize = batch
	cfg.MinIdle = time.Minute
	cfg.ShutdownGrace = 10 * time.Second
	r := b.start(app, cfg)
	testenv.Eventually(b.t, 10*time.Second, "every worker to take a batch", func() bool { return entered.Load() == workers })
	testenv.Eventually(b.t, 10*time.Second, "the next batch read while the workers are stuck", func() bool {
		return b.pending("p1") >= (workers+1)*batch
	})
	stopped := make(chan struct{})
	go func() { r.stop(); close(stopped) }()
	time.Sleep(200 * time.Millisecond)
	select {
	case <-stopped:
		t.Fatal("Run returned while its batches were in flight")
	default:
	}
	close(release)
	select {
	case <-stopped:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return")
	}
	rows := b.ledgerRows()
	if rows < workers*batch {
		t.Errorf("%d ledger rows after the stop, want at least %d: the batches in flight", rows, workers*batch)
	}
	if got := b.backlog(); got != n-rows {
		t.Errorf("I4: %d entries left in the stream with %d of %d committed: every committed entry must be deleted before Run returns, and no other", got, rows, n)
	}
	r2 := b.start(b.store, claiming("p2"))
	b.waitDrained(20 * time.Second)
	r2.stop()
	if got := sum(b.tallies("lunch")); got != n {
		t.Errorf("total votes %d, want %d", got, n)
	}
}

// With several workers, each principal's entries still reach the ledger
// in stream order: a principal's first answer is the one recorded and the
// second is refused as already_responded, though the two sit in different
// batches and batches are applied at once (with random delays so that
// they finish in any order).
func TestWorkersKeepEachPrincipalsOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll("lunch", "pizza", "sushi")
	const n, lag = 400, 7
	var es []stream.Entry
	for i := range n + lag {
		if i < n {
			es = append(es, ballot(fmt.Sprintf("u%d", i), "first", "lunch", "pizza"))
		}
		if j := i - lag; j >= 0 {
			es = append(es, ballot(fmt.Sprintf("u%d", j), "second", "lunch", "sushi"))
		}
	}
	b.enqueue(es...)
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(3, 4))
	app := applierFunc(func(ctx context.Context, events []ledger.Event) ([]ledger.Outcome, error) {
		mu.Lock()
		d := time.Duration(rng.IntN(3000)) * time.Microsecond
		mu.Unlock()
		time.Sleep(d)
		return b.store.Append(ctx, events)
	})
	o := newOverlap(app, 3)
	cfg := fast("p1")
	cfg.Workers = 3
	cfg.BatchSize = 5
	r := b.start(o, cfg)
	b.waitDrained(30 * time.Second)
	r.stop()
	o.check(t)
	if got := b.tallies("lunch"); got["pizza"] != n || got["sushi"] != 0 {
		t.Errorf("tallies %v, want pizza %d and sushi 0: a second answer overtook a first one", got, n)
	}
	var refused int
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM poll_event_rejections
		WHERE client_event_id = 'second' AND reason = 'already_responded'`).Scan(&refused); err != nil || refused != n {
		t.Errorf("%d second answers recorded as already_responded (%v), want %d", refused, err, n)
	}
}
