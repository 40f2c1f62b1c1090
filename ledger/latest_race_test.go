package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"tally/internal/testenv"
	"tally/ledger"
	"tally/vote"
)

// TestConcurrentLatestChanges runs appenders, each with a Store of its own
// as separate projectors are (or all on one Store, as one projector's
// workers are, without its lanes), that change the ballots of the same
// few principals of polls of answers latest at once, every event a new
// key.
// Every ballot is recorded; each principal ends with exactly one ballot
// that counts, its last in its poll's log, which every other of its
// ballots reads as superseded by; the poll counts one ballot per
// principal; and rebuild finds the projection equal to the recount of the
// last ballots. Without the append's check, under its polls' log heads,
// that no append before it in the log recorded a later ballot of one of
// its principals, two appends take the same old ballot out twice, or
// count one that is not the last in the log; without the check that
// what the Store knows of who has a ballot (voters.go) explains every
// leaf the log got since, an appender on one Store misses a ballot
// another recorded.
func TestConcurrentLatestChanges(t *testing.T) {
	t.Parallel()
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("one-store=%v", shared), func(t *testing.T) {
			t.Parallel()
			concurrentLatestChanges(t, shared)
		})
	}
}

func concurrentLatestChanges(t *testing.T, shared bool) {
	b := setup(t)
	polls := []ledger.Poll{
		b.ballotPoll(t, "single", vote.Spec{Answers: "latest"}, 3),
		b.ballotPoll(t, "ranked", vote.Spec{Kind: "ranked", Answers: "latest"}, 3),
	}
	const workers, batches, size, principals = 4, 15, 40, 12
	const appendWait, allWait = 30 * time.Second, 2 * time.Minute
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	var mu sync.Mutex
	var keys []ledger.EventKey
	for w := range workers {
		store := b.store
		if !shared {
			var err error
			if store, err = ledger.New(b.db.Pool, ledger.Config{}); err != nil {
				t.Fatal(err)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range batches {
				batch := make([]ledger.Event, size)
				for j := range batch {
					p := polls[rng.IntN(len(polls))]
					c := rotated(p.Choices, rng.IntN(3))
					answer := c[0]
					if p.Rules.Kind == vote.KindRanked {
						answer = vote.Ballot{Kind: vote.KindRanked, Choices: c[:1+rng.IntN(3)]}.Canonical()
					}
					// Half are one of a few principals every batch may
					// change; half a principal new in the batches of round
					// i, which the other appenders' batches of round i may
					// hold too (their first ballots, at once).
					principal := fmt.Sprintf("u%d", rng.IntN(principals))
					if rng.IntN(2) == 0 {
						principal = fmt.Sprintf("f%d-%d", i, rng.IntN(principals))
					}
					batch[j] = ledger.EventOf(principal, fmt.Sprintf("w%d-%d-%d", w, i, j), p.ID, answer, time.Now())
				}
				var outs []ledger.Outcome
				var err error
				for range 10 { // a deadlock still reported after Append's retries is retryable
					ctx, cancel := context.WithTimeout(t.Context(), appendWait)
					outs, err = store.Append(ctx, batch)
					cancel()
					if err == nil || !ledger.IsRetryable(err) {
						break
					}
				}
				if err != nil {
					if errors.Is(err, context.DeadlineExceeded) {
						err = fmt.Errorf("Append did not return within %s: %w", appendWait, err)
					}
					errs <- fmt.Errorf("worker %d batch %d: %w", w, i, err)
					return
				}
				mu.Lock()
				for j, o := range outs {
					if o.Status != ledger.StatusRecorded {
						errs <- fmt.Errorf("worker %d batch %d event %d: %s, want recorded", w, i, j, o)
						mu.Unlock()
						return
					}
					keys = append(keys, ledger.EventKey{PrincipalID: batch[j].PrincipalID, ClientEventID: batch[j].ClientEventID})
				}
				mu.Unlock()
			}
		}()
	}
	testenv.WaitGroup(t, &wg, allWait, fmt.Sprintf("%d appenders of %d batches each", workers, batches))
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	checkInvariants(t, b)

	// The last ballot of each (poll, principal) in its poll's log.
	last := map[[2]string]string{}
	if err := b.store.Export(b.ctx, "", func(r ledger.LedgerRow) error {
		if r.Definition == nil {
			last[[2]string{r.PollID, r.PrincipalID}] = r.ClientEventID
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	recs, err := b.store.Events(b.ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	counting := map[string]int64{}
	for _, k := range keys {
		r := recs[k]
		want := last[[2]string{r.PollID, k.PrincipalID}]
		switch {
		case k.ClientEventID == want && r.Status == ledger.StatusRecorded:
			counting[r.PollID]++
		case k.ClientEventID != want && r.Status == ledger.StatusSuperseded && r.SupersededBy == want:
		default:
			t.Errorf("%s's ballot %s in %s: %s by %q; its last in the log is %s", k.PrincipalID, k.ClientEventID, r.PollID, r.Status, r.SupersededBy, want)
		}
	}
	for _, p := range polls {
		res, err := b.store.Results(b.ctx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		if res.Ballots != counting[p.ID] {
			t.Errorf("poll %s counts %d ballots; %d principals have one that counts", p.ID, res.Ballots, counting[p.ID])
		}
	}
}

// rotated is choices rotated by r.
func rotated(choices []string, r int) []string {
	return append(append([]string{}, choices[r:]...), choices[:r]...)
}

// TestLatestChangeOfAnotherStoresBallot: a Store that has appended to a
// poll of answers latest, and so knows who has a ballot there, changes the
// ballot of a principal whose first ballot another Store recorded since,
// round after round (so past the rounds in which the first Store reloads
// what it knows, and the one after which it stops keeping the poll). Each
// change takes that first ballot out: the poll counts one ballot per
// principal, its change. Without the check under the head that every
// leaf since is one the Store knows of, the first ballots stay counted.
func TestLatestChangeOfAnotherStoresBallot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.ballotPoll(t, "l", vote.Spec{Answers: "latest"}, 2)
	other, err := ledger.New(b.db.Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	appendOne := func(s *ledger.Store, principal, key, choice string) {
		t.Helper()
		outs, err := s.Append(b.ctx, []ledger.Event{ledger.EventOf(principal, key, p.ID, choice, time.Now())})
		if err != nil {
			t.Fatal(err)
		}
		if outs[0].Status != ledger.StatusRecorded {
			t.Fatalf("%s's %s: %s, want recorded", principal, key, outs[0])
		}
	}
	appendOne(b.store, "u", "k1", p.Choices[0])
	const rounds = 200
	for i := range rounds {
		principal := fmt.Sprintf("v%d", i)
		appendOne(other, principal, "k1", p.Choices[0])
		appendOne(b.store, principal, "k2", p.Choices[1])
	}
	res, err := b.store.Results(b.ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{p.Choices[0]: 1, p.Choices[1]: rounds}
	for _, r := range res.Results {
		if r.Votes != want[r.CandidateID] {
			t.Errorf("%s has %d votes, want %d", r.CandidateID, r.Votes, want[r.CandidateID])
		}
	}
	if res.Ballots != rounds+1 {
		t.Errorf("%d ballots counted, want %d", res.Ballots, rounds+1)
	}
	checkInvariants(t, b)
}
