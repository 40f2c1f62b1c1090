package ledger_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"tally/internal/testenv"
	"tally/ledger"
	"tally/vote"
)

// TestLatestBatchBeyondLockTable: on a private server whose shared lock
// table is small (max_locks_per_transaction 10, about 2,100 entries), a
// batch of 20,000 principals of a latest poll goes in and counts each of
// them, and so does a batch that changes every one of their ballots: an
// append takes no lock per (poll, principal), so the size of a batch is
// not bounded by the lock table.
func TestLatestBatchBeyondLockTable(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	ctx := t.Context()
	admin, err := pgx.Connect(ctx, srv.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = admin.Exec(ctx, `ALTER SYSTEM SET max_locks_per_transaction = 10`)
	admin.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv.Restart()
	db := srv.Migrated("locks")
	store, err := ledger.New(db.Pool, ledger.Config{MaxAttempts: 1, MaxBatch: 20_000})
	if err != nil {
		t.Fatal(err)
	}
	b := bundle{db: db, store: store, ctx: context.Background()}
	p := b.ballotPoll(t, "latest", vote.Spec{Answers: "latest"}, 2)
	batch := func(key, choice string) []ledger.Event {
		events := make([]ledger.Event, 20_000)
		for i := range events {
			events[i] = ev(fmt.Sprintf("u%d", i), key, p.ID, choice)
		}
		return events
	}
	actx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, step := range []struct{ key, choice string }{{"k1", "c0"}, {"k2", "c1"}} {
		if _, err := store.Append(actx, batch(step.key, step.choice)); err != nil {
			t.Fatalf("a batch of 20000 principals' ballots %s (%s) in a lock table of about 2100: %v", step.key, step.choice, err)
		}
		res, err := store.Results(actx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res.Results {
			want := int64(0)
			if r.CandidateID == step.choice {
				want = 20_000
			}
			if r.Votes != want {
				t.Errorf("after the ballots %s, %s has %d votes, want %d", step.key, r.CandidateID, r.Votes, want)
			}
		}
		if res.Ballots != 20_000 {
			t.Errorf("after the ballots %s, the poll counts %d ballots, want 20000", step.key, res.Ballots)
		}
	}
}
