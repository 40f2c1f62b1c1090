package projector_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"tally/ledger"
	"tally/stream"
)

// Two projectors race on one stream of 50k entries, with exact duplicates
// among them, failures before commit and commits whose answer is lost.
// The final tallies equal the ground truth, every entry is acknowledged and
// deleted, and neither projector deadlocks.
func TestRacingProjectors(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	const (
		polls   = 5
		unique  = 45_000
		repeats = 5_000
	)
	choices := []string{"a", "b", "c"}
	for i := range polls {
		b.poll(fmt.Sprintf("poll%d", i), choices...)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	truth := map[string]map[string]int64{}
	entries := make([]stream.Entry, 0, unique+repeats)
	for i := range unique {
		poll := fmt.Sprintf("poll%d", i%polls)
		choice := choices[rng.IntN(len(choices))]
		entries = append(entries, vote(fmt.Sprintf("u%d", i), "k1", poll, choice))
		if truth[poll] == nil {
			truth[poll] = map[string]int64{}
		}
		truth[poll][choice]++
	}
	for range repeats { // a client retrying, or intake enqueueing twice
		entries = append(entries, entries[rng.IntN(unique)])
	}
	rng.Shuffle(len(entries), func(i, j int) { entries[i], entries[j] = entries[j], entries[i] })
	b.enqueue(entries...)

	fail := transient(t)
	var calls, failedBefore, lostAnswers atomic.Int64
	app := applierFunc(func(ctx context.Context, events []ledger.Event) ([]ledger.Outcome, error) {
		n := calls.Add(1)
		if n%11 == 0 {
			failedBefore.Add(1)
			return nil, fail
		}
		outcomes, err := b.store.Append(ctx, events)
		if err == nil && n%13 == 0 {
			lostAnswers.Add(1)
			return nil, fail
		}
		return outcomes, err
	})
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

	for poll, want := range truth {
		got := b.tallies(poll)
		for _, c := range choices {
			if got[c] != want[c] {
				t.Errorf("%s %s: %d votes, want %d", poll, c, got[c], want[c])
			}
		}
	}
	if got := b.ledgerRows(); got != unique {
		t.Errorf("%d ledger rows, want %d", got, unique)
	}
	if ds := b.deadLetters(); len(ds) != 0 {
		t.Errorf("%d dead letters, want none; first %+v", len(ds), ds[0])
	}
	if failedBefore.Load() == 0 || lostAnswers.Load() == 0 {
		t.Errorf("no fault was injected: %d failures before commit, %d lost answers", failedBefore.Load(), lostAnswers.Load())
	}
	recorded := r1.metric("tally_projector_events_total", "outcome", "recorded") + r2.metric("tally_projector_events_total", "outcome", "recorded")
	if recorded > unique {
		t.Errorf("recorded metrics sum to %v, more than the %d unique events", recorded, unique)
	}
	for _, r := range []*running{r1, r2} {
		if r.metric("tally_projector_batch_size") == 0 {
			t.Errorf("projector %s applied nothing: no race", r.p.Consumer())
		}
	}
	t.Logf("%d Append calls, %d failed before commit, %d lost answers", calls.Load(), failedBefore.Load(), lostAnswers.Load())
	b.checkInvariants()
}
