package intake_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"tally/internal/testenv"
	"tally/ledger"
)

// TestCatalogChangeDuringListenerGap: intake's LISTEN connection is
// killed and, while intake can reach PostgreSQL no more (its pool
// refuses every connection), a poll is closed and another created: their
// NOTIFYs reach no listener, and intake keeps serving what it held. Once
// PostgreSQL is reachable again the listener reconnects, and intake
// applies both changes made in the gap, with no periodic check to find
// them (CatalogRefresh an hour) and no NOTIFY after them.
func TestCatalogChangeDuringListenerGap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.Postgres(t)
	store, gap := gatedStore(t, db)
	b := setup(t, func(c *config) { c.store, c.CatalogRefresh = store, time.Hour })
	writer := newStore(t, db.Pool)      // the test's own changes, made in the gap
	_, other := b.principal(t, "other") // votes once on p1, in the gap
	if r := b.vote(t, b.token, "e0", "p1", "a"); r.code != http.StatusAccepted {
		t.Fatalf("vote: %d %s", r.code, r.raw)
	}
	listeners := func() []int32 { return catalogListeners(t, db) }
	var killed []int32
	testenv.Eventually(t, 5*time.Second, "a LISTEN connection to kill", func() bool {
		killed = listeners()
		return len(killed) > 0
	})

	gap.Store(true)
	for _, pid := range killed {
		if _, err := db.Pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 10*time.Second, "the killed listener's backend to end", func() bool {
		return len(listeners()) == 0
	})
	if err := writer.ClosePoll(ctx, "p1", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := writer.CreatePoll(ctx, ledger.Poll{ID: "gap", Title: "Made in the gap", Choices: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	// The changes are in the gap: intake has not seen them.
	if r := b.vote(t, other, "e1", "p1", "a"); r.code != http.StatusAccepted {
		t.Fatalf("a vote on p1 in the gap: %d %s, want 202 (intake cannot have seen its close)", r.code, r.raw)
	}
	if r := b.vote(t, b.token, "e2", "gap", "x"); r.code != http.StatusNotFound {
		t.Fatalf("a vote on the poll made in the gap, in the gap: %d %s, want 404", r.code, r.raw)
	}

	gap.Store(false)
	testenv.Eventually(t, 20*time.Second, "the catalog listener to reconnect", func() bool {
		return slices.ContainsFunc(listeners(), func(pid int32) bool { return !slices.Contains(killed, pid) })
	})
	testenv.Eventually(t, 5*time.Second, "intake to apply the changes made in the listener's gap", func() error {
		if r := b.vote(t, b.token, testenv.RandomName("e"), "p1", "a"); r.code != http.StatusUnprocessableEntity {
			return fmt.Errorf("a vote on p1, closed in the gap, answered %d", r.code)
		}
		if r := b.vote(t, b.token, testenv.RandomName("e"), "gap", "x"); r.code != http.StatusAccepted {
			return fmt.Errorf("a vote on the poll made in the gap answered %d", r.code)
		}
		return nil
	})
}

// gatedStore is a store on db whose pool, while the flag it returns is
// set, refuses every connection it would hand out: PostgreSQL out of
// intake's reach, for intake alone.
func gatedStore(t *testing.T, db testenv.DB) (*ledger.Store, *atomic.Bool) {
	t.Helper()
	gap := new(atomic.Bool)
	errGap := errors.New("the test holds intake's connections back")
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.PrepareConn = func(context.Context, *pgx.Conn) (bool, error) {
		if gap.Load() {
			return true, errGap
		}
		return true, nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return newStore(t, pool), gap
}

// catalogListeners are the pids of the connections to db that listen for
// catalog changes.
func catalogListeners(t *testing.T, db testenv.DB) []int32 {
	t.Helper()
	var pids []int32
	if err := db.Pool.QueryRow(context.Background(), `
SELECT coalesce(array_agg(pid), '{}') FROM pg_stat_activity
WHERE datname = current_database() AND query = 'LISTEN tally_catalog'`).Scan(&pids); err != nil {
		t.Fatal(err)
	}
	return pids
}
