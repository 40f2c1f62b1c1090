package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"tally/internal/testenv"
	"tally/ledger"
)

// checkInvariants asserts I3 and I7 on the whole database: the projection
// equals the count of ledger rows, and every poll's log is its rows'. (I2, one ledger row per key and per (poll,
// principal), is the schema's own UNIQUE constraints; tests check what
// Append told its callers against the rows instead.)
func checkInvariants(t *testing.T, b bundle) ledger.Report {
	t.Helper()
	rep, err := b.store.Rebuild(b.ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Differing != 0 {
		t.Errorf("I3: projection differs from the ledger: %+v", rep.Diffs())
	}
	if rep.LogProblems != 0 {
		t.Errorf("I7: a poll's log does not verify against its rows: %+v", rep.Logs)
	}
	return rep
}

// TestConcurrentAppends runs several appenders on overlapping batches (the
// same principals, keys and polls, exact retries) at once. Every batch must
// succeed (retried by the caller when Append reports a retryable error),
// every (principal, key) is recorded by at
// most one of them, and the ledger holds exactly the rows the appenders were
// told were recorded, with the seq, poll and candidate they were told.
func TestConcurrentAppends(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll(t, "p1", "a", "b", "c")
	b.poll(t, "p2", "a", "b")
	const workers, batches, size = 6, 25, 200
	var mu sync.Mutex
	var deadlocks atomic.Int64                     // surfaced after Append's retries, retried by the caller
	recorded := map[[2]string][]ledger.LedgerRow{} // (principal, key) -> each time told recorded
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	// Each Append waits at most appendWait, so a bug that blocks appends (a
	// pool exhausted, a lock never released) fails the test naming the
	// batch, and stops the appenders.
	const appendWait, allWait = 30 * time.Second, 2 * time.Minute
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			var last []ledger.Event
			for i := 0; i < batches; i++ {
				batch := make([]ledger.Event, size)
				for j := range batch {
					batch[j] = ledger.Event{
						PrincipalID:   fmt.Sprintf("u%d", rng.IntN(400)),
						ClientEventID: fmt.Sprintf("k%d", rng.IntN(3)),
						PollID:        []string{"p1", "p2"}[rng.IntN(2)],
						CandidateID:   []string{"a", "b", "c"}[rng.IntN(3)],
						ReceivedAt:    time.Now(),
					}
				}
				if last != nil && rng.IntN(4) == 0 {
					batch = last
				}
				// A batch that keeps losing races to the others, or a deadlock
				// still reported after Append's own retries (these appenders
				// share principals, which the projector's lanes never do), is
				// retryable, and callers retry it, as the projector does.
				var outs []ledger.Outcome
				var err error
				for attempt := 0; attempt < 10; attempt++ {
					ctx, cancel := context.WithTimeout(t.Context(), appendWait)
					outs, err = b.store.Append(ctx, batch)
					cancel()
					if err == nil || !ledger.IsRetryable(err) {
						break
					}
					if strings.Contains(err.Error(), "40P01") {
						deadlocks.Add(1)
					}
				}
				switch {
				case errors.Is(err, context.DeadlineExceeded):
					errs <- fmt.Errorf("worker %d batch %d: Append did not return within %s: %w", w, i, appendWait, err)
					return
				case err != nil:
					errs <- fmt.Errorf("worker %d batch %d: %w", w, i, err)
					return
				}
				mu.Lock()
				for j, o := range outs {
					if o.Status == ledger.StatusRecorded {
						e := batch[j]
						k := [2]string{e.PrincipalID, e.ClientEventID}
						recorded[k] = append(recorded[k], ledger.LedgerRow{Seq: o.Seq, PollID: e.PollID, CandidateID: e.CandidateID})
					}
				}
				mu.Unlock()
				last = batch
			}
		}(w)
	}
	testenv.WaitGroup(t, &wg, allWait, fmt.Sprintf("%d appenders of %d batches each", workers, batches))
	t.Logf("%d deadlocks reported after Append's own retries, retried by the appenders", deadlocks.Load())
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for k, told := range recorded {
		if len(told) > 1 {
			t.Errorf("I2: %v recorded %d times", k, len(told))
		}
	}
	checkInvariants(t, b)
	rows := 0
	if err := b.store.Export(b.ctx, "", func(r ledger.LedgerRow) error {
		if r.Definition != nil {
			return nil
		}
		rows++
		told := recorded[[2]string{r.PrincipalID, r.ClientEventID}]
		if len(told) == 0 || told[0].Seq != r.Seq || told[0].PollID != r.PollID || told[0].CandidateID != r.CandidateID {
			t.Errorf("ledger row %d (%s %s: %s/%s) is not what an appender was told was recorded: %+v",
				r.Seq, r.PrincipalID, r.ClientEventID, r.PollID, r.CandidateID, told)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if rows == 0 || rows != len(recorded) {
		t.Errorf("ledger has %d rows, %d keys were recorded", rows, len(recorded))
	}
}

// TestLedgerIsAppendOnly checks I5 at the database: UPDATE, DELETE and
// TRUNCATE on poll_events fail, with a message that says why, and change
// nothing.
func TestLedgerIsAppendOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll(t, "p", "a", "b")
	if _, err := b.store.Append(b.ctx, []ledger.Event{ev("u1", "k1", "p", "a"), ev("u2", "k1", "p", "b")}); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`UPDATE poll_events SET candidate_id = 'b' WHERE principal_id = 'u1'`,
		`DELETE FROM poll_events WHERE principal_id = 'u1'`,
		`TRUNCATE poll_events`,
		`TRUNCATE poll_events CASCADE`,
	} {
		_, err := b.db.Pool.Exec(b.ctx, stmt)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" || !strings.Contains(pgErr.Message, "append-only") {
			t.Errorf("%s: got %v, want the append-only refusal (42501)", stmt, err)
		}
	}
	var n int
	var cand string
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT count(*), min(candidate_id) FILTER (WHERE principal_id = 'u1') FROM poll_events`).Scan(&n, &cand); err != nil {
		t.Fatal(err)
	}
	if n != 2 || cand != "a" {
		t.Errorf("ledger changed: %d rows, u1 voted %q", n, cand)
	}
	checkInvariants(t, b)
}

// TestRebuildFindsAndRepairsDrift changes the projection behind the
// ledger's back, checks that Rebuild names the row, and repairs it with
// Repair while appends continue: afterwards no append is lost or counted
// twice.
func TestRebuildFindsAndRepairsDrift(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll(t, "p", "a", "b")
	b.poll(t, "q", "x")
	var seed []ledger.Event
	for i := 0; i < 50; i++ {
		seed = append(seed, ev(fmt.Sprintf("s%d", i), "k", "p", []string{"a", "b"}[i%2]))
	}
	if _, err := b.store.Append(b.ctx, seed); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Pool.Exec(b.ctx, `UPDATE poll_results SET vote_count = vote_count + 7 WHERE poll_id = 'p' AND candidate_id = 'b'`); err != nil {
		t.Fatal(err)
	}
	rep, err := b.store.Rebuild(b.ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	diffs := rep.Diffs()
	if len(diffs) != 1 || diffs[0] != (ledger.TallyRow{PollID: "p", CandidateID: "b", Ledger: 25, Projection: 32}) {
		t.Fatalf("diffs %+v, want p/b ledger 25 projection 32", diffs)
	}
	if only, err := b.store.Rebuild(b.ctx, "q"); err != nil || only.Differing != 0 || len(only.Rows) != 1 {
		t.Fatalf("rebuild of poll q: %+v, %v", only, err)
	}

	// Appends go on while Repair runs several times.
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	recorded := 0
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				batch := make([]ledger.Event, 20)
				for j := range batch {
					batch[j] = ev(fmt.Sprintf("w%d-%d-%d", w, i, j), "k", "p", []string{"a", "b"}[j%2])
				}
				outs, err := b.store.Append(ctx, batch)
				if err != nil {
					t.Errorf("append during repair: %v", err)
					return
				}
				mu.Lock()
				for _, o := range outs {
					if o.Status == ledger.StatusRecorded {
						recorded++
					}
				}
				mu.Unlock()
			}
		}(w)
	}
	var repaired []ledger.TallyRow
	for i := 0; i < 5; i++ {
		changed, err := b.store.Repair(ctx, "")
		if err != nil {
			t.Fatalf("repair: %v", err)
		}
		repaired = append(repaired, changed...)
		time.Sleep(10 * time.Millisecond)
	}
	testenv.WaitGroup(t, &wg, time.Minute, "the appenders running beside Repair")
	if len(repaired) != 1 || repaired[0].PollID != "p" || repaired[0].CandidateID != "b" || repaired[0].Projection-repaired[0].Ledger != 7 {
		t.Errorf("repairs %+v, want exactly the one drifted row, 7 too high", repaired)
	}
	rep = checkInvariants(t, b)
	if rep.LedgerEvents != int64(50+recorded) || recorded != 3*40*20 {
		t.Errorf("ledger has %d events, want 50 + %d recorded (of %d sent)", rep.LedgerEvents, recorded, 3*40*20)
	}
}

// TestRebuildWhileAppending: a rebuild checks the polls' logs on several
// connections at once while appends go on; each connection reads the
// recount's snapshot, so every log it checks holds exactly the rows the
// recount counted. A connection that read a later state would find more
// rows than its head's size.
func TestRebuildWhileAppending(t *testing.T) {
	t.Parallel()
	b := setup(t)
	polls := []string{"p0", "p1", "p2", "p3"}
	for _, p := range polls {
		b.poll(t, p, "a", "b")
	}
	ctx, stop := context.WithCancel(b.ctx)
	defer stop()
	appended := make(chan error, 1)
	go func() {
		n := 0
		for ctx.Err() == nil && n < 200_000 {
			batch := make([]ledger.Event, 0, 200)
			for range 200 {
				n++
				batch = append(batch, ev(fmt.Sprintf("u%d", n), "k1", polls[n%len(polls)], []string{"a", "b"}[n%2]))
			}
			if _, err := b.store.Append(ctx, batch); err != nil && ctx.Err() == nil {
				appended <- err
				return
			}
		}
		appended <- nil
	}()
	for i := range 15 {
		rep, err := b.store.Rebuild(b.ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if rep.Differing != 0 || rep.LogProblems != 0 || len(rep.Logs) != len(polls) {
			t.Fatalf("rebuild %d while appending: %d tallies differ, %d log problems (%+v)", i, rep.Differing, rep.LogProblems, rep.Logs)
		}
		var leaves int64
		for _, c := range rep.Logs {
			leaves += c.Size - c.Definitions
		}
		if leaves != rep.LedgerEvents {
			t.Fatalf("rebuild %d: the logs hold %d leaves of votes, the recount %d events", i, leaves, rep.LedgerEvents)
		}
	}
	stop()
	if err := testenv.Receive(t, appended, time.Minute, "the appender to stop"); err != nil {
		t.Fatalf("append: %v", err)
	}
}
