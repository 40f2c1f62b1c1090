package ledger_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"tally/internal/testenv"
	"tally/ledger"
	"tally/vote"
)

// TestLockTableFull: on a private server whose shared lock table is small
// (max_locks_per_transaction 10), a batch of a latest poll that locks more
// (poll, principal) pairs than the table holds fails with out of shared
// memory, not retryable (the same batch would fail again), and the error
// says what to do; a batch a tenth its size, as the projector's halving
// reaches, goes in.
func TestLockTableFull(t *testing.T) {
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
	batch := func(n int, prefix string) []ledger.Event {
		events := make([]ledger.Event, n)
		for i := range events {
			events[i] = ev(fmt.Sprintf("%s%d", prefix, i), "k", p.ID, "c0")
		}
		return events
	}

	// The table holds 10 × (200 connections + the background processes),
	// and takes up to about twice that from the shared memory's slack.
	_, err = store.Append(ctx, batch(20_000, "big"))
	if err == nil {
		t.Fatal("a batch of 20000 locks went into a lock table of about 2100")
	}
	if ledger.IsRetryable(err) {
		t.Errorf("lock table full is retryable: %v", err)
	}
	for _, w := range []string{"out of shared memory", "max_locks_per_transaction"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q lacks %q", err, w)
		}
	}
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := store.Append(actx, batch(500, "small")); err != nil {
		t.Errorf("a batch of 500 after the failed one: %v", err)
	}
}
