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
// as separate projectors are, that change the ballots of the same few
// principals of polls of answers latest at once, every event a new key.
// Every ballot is recorded; each principal ends with exactly one ballot
// that counts, its last in its poll's log, which every other of its
// ballots reads as superseded by; the poll counts one ballot per
// principal; and rebuild finds the projection equal to the recount of the
// last ballots. Without the append's check, under its polls' log heads,
// that no append before it in the log recorded a later ballot of one of
// its principals, two appends take the same old ballot out twice, or
// count one that is not the last in the log.
func TestConcurrentLatestChanges(t *testing.T) {
	t.Parallel()
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
		store, err := ledger.New(b.db.Pool, ledger.Config{})
		if err != nil {
			t.Fatal(err)
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
					batch[j] = ledger.EventOf(fmt.Sprintf("u%d", rng.IntN(principals)), fmt.Sprintf("w%d-%d-%d", w, i, j), p.ID, answer, time.Now())
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
