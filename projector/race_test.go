package projector_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"tally/ledger"
	"tally/projector"
	"tally/stream"
)

// Two projectors race on one stream of 50k entries, with exact duplicates
// among them, failures before commit and commits whose answer is lost.
// The final tallies equal the ground truth, every entry is acknowledged and
// deleted, and neither projector deadlocks.
func TestRacingProjectors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bl := b.enqueueBacklog(rand.New(rand.NewPCG(1, 2)), 5, 45_000, 5_000)

	app, f := b.faulty(11, 13)
	cfg := fast("racer-1")
	cfg.BatchSize = 1000
	cfg.MinIdle = 3 * time.Second
	cfg.ClaimInterval = 250 * time.Millisecond
	cfg.BreakerFailures = 1000
	r1 := b.start(app, cfg)
	cfg.Consumer = "racer-2"
	r2 := b.start(app, cfg)
	b.waitDrained(60 * time.Second)
	r1.stop()
	r2.stop()

	bl.check(b)
	if got := b.ledgerRows(); got != int64(bl.unique) {
		t.Errorf("%d ledger rows, want %d", got, bl.unique)
	}
	if ds := b.deadLetters(); len(ds) != 0 {
		t.Errorf("%d dead letters, want none; first %+v", len(ds), ds[0])
	}
	f.check(t)
	recorded := r1.metric("tally_projector_events_total", "outcome", "recorded") + r2.metric("tally_projector_events_total", "outcome", "recorded")
	if recorded > float64(bl.unique) {
		t.Errorf("recorded metrics sum to %v, more than the %d unique events", recorded, bl.unique)
	}
	for _, r := range []*running{r1, r2} {
		if r.metric("tally_projector_batch_size") == 0 {
			t.Errorf("projector %s applied nothing: no race", r.p.Consumer())
		}
	}
}

// backlog is what enqueueBacklog enqueued: the tallies it must end in.
type backlog struct {
	choices []string
	unique  int                         // distinct events, one per principal
	truth   map[string]map[string]int64 // poll -> choice -> votes
}

// enqueueBacklog enqueues unique votes of distinct principals spread over
// polls (created here, "poll0"...), plus repeats exact copies of some of
// them (a client retrying, or intake enqueueing twice), shuffled.
func (b *bundle) enqueueBacklog(rng *rand.Rand, polls, unique, repeats int) backlog {
	b.t.Helper()
	bl := backlog{choices: []string{"a", "b", "c"}, unique: unique, truth: map[string]map[string]int64{}}
	for i := range polls {
		b.poll(fmt.Sprintf("poll%d", i), bl.choices...)
	}
	entries := make([]stream.Entry, 0, unique+repeats)
	for i := range unique {
		poll := fmt.Sprintf("poll%d", i%polls)
		choice := bl.choices[rng.IntN(len(bl.choices))]
		entries = append(entries, ballot(fmt.Sprintf("u%d", i), "k1", poll, choice))
		if bl.truth[poll] == nil {
			bl.truth[poll] = map[string]int64{}
		}
		bl.truth[poll][choice]++
	}
	for range repeats {
		entries = append(entries, entries[rng.IntN(unique)])
	}
	rng.Shuffle(len(entries), func(i, j int) { entries[i], entries[j] = entries[j], entries[i] })
	b.enqueue(entries...)
	return bl
}

// check compares the projection of the backlog's polls with the truth.
func (bl backlog) check(b *bundle) {
	b.t.Helper()
	for poll, want := range bl.truth {
		got := b.tallies(poll)
		for _, c := range bl.choices {
			if got[c] != want[c] {
				b.t.Errorf("%s %s: %d votes, want %d", poll, c, got[c], want[c])
			}
		}
	}
}

// faults counts what faulty injected.
type faults struct {
	calls, failedBefore, lostAnswers atomic.Int64
}

// check fails the test when a kind of fault was never injected: the test
// would prove nothing about it.
func (f *faults) check(t *testing.T) {
	t.Helper()
	if f.failedBefore.Load() == 0 || f.lostAnswers.Load() == 0 {
		t.Errorf("no fault was injected: %d failures before commit, %d lost answers", f.failedBefore.Load(), f.lostAnswers.Load())
	}
	t.Logf("%d Append calls, %d failed before commit, %d lost answers", f.calls.Load(), f.failedBefore.Load(), f.lostAnswers.Load())
}

// faulty applies through the test's ledger, but fails every failEvery-th
// call with a transient error before anything commits, and loses the
// answer of every loseEvery-th call: it commits, and the projector sees a
// transient error. A batch holding an event whose client key is "boom"
// fails with a permanent error.
func (b *bundle) faulty(failEvery, loseEvery int64) (projector.Applier, *faults) {
	fail := transient(b.t)
	f := &faults{}
	return applierFunc(func(ctx context.Context, events []ledger.Event) ([]ledger.Outcome, error) {
		if contains(events, "boom") {
			return nil, fmt.Errorf("append batch: %w", errPermanent)
		}
		n := f.calls.Add(1)
		if n%failEvery == 0 {
			f.failedBefore.Add(1)
			return nil, fail
		}
		outcomes, err := b.store.Append(ctx, events)
		if err == nil && n%loseEvery == 0 {
			f.lostAnswers.Add(1)
			return nil, fail
		}
		return outcomes, err
	}), f
}
