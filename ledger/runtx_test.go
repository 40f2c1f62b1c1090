package ledger

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"tally/internal/testenv"
)

// TestRunTxRetries: a conflict is tried MaxAttempts times, each retry
// logged, and the last error returned; other errors are not retried; a
// context that ends during the backoff ends runTx at once.
func TestRunTxRetries(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	var logs testenv.LogBuffer
	s, err := New(db.Pool, Config{MaxAttempts: 3, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	calls := 0
	err = s.runTx(ctx, "op", pgx.TxOptions{}, func(pgx.Tx) error { calls++; return errRaced })
	if calls != 3 || !errors.Is(err, errRaced) || !IsRetryable(err) || !strings.HasPrefix(err.Error(), "op: ") {
		t.Errorf("always raced: %d calls, error %v; want 3 calls and the retryable race", calls, err)
	}
	if n := strings.Count(logs.String(), "transaction conflict, retrying"); n != 2 {
		t.Errorf("%d retries logged, want 2:\n%s", n, logs.String())
	}

	calls = 0
	boom := errors.New("boom")
	if err := s.runTx(ctx, "op", pgx.TxOptions{}, func(pgx.Tx) error { calls++; return boom }); calls != 1 || !errors.Is(err, boom) {
		t.Errorf("plain failure: %d calls, error %v; want 1 call and boom", calls, err)
	}

	calls = 0
	cctx, cancel := context.WithCancel(ctx)
	err = s.runTx(cctx, "op", pgx.TxOptions{}, func(pgx.Tx) error { calls++; cancel(); return errRaced })
	if calls != 1 || !errors.Is(err, context.Canceled) || err.Error() != "op: context canceled" {
		t.Errorf("cancelled during backoff: %d calls, error %v; want 1 call and op: context canceled", calls, err)
	}
}
