package ledger_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"tally/internal/testenv"
	"tally/ledger"
)

// TestCatalogPageNotJITCompiled: on sessions where PostgreSQL would
// JIT-compile any query (every JIT cost threshold 0), a page of the
// catalog (PollsAfter) is run without compiling, while the whole-catalog
// read of the same columns (Polls) on the same sessions is compiled. The
// server reports each compilation to a client at client_min_messages
// debug1 ("time to inline: ..., opt: ..., emit: ..."), which is what the
// test counts: what PostgreSQL did, not which statements ran.
func TestCatalogPageNotJITCompiled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.Postgres(t)
	var available bool
	if err := db.Pool.QueryRow(ctx, `SELECT pg_jit_available()`).Scan(&available); err != nil {
		t.Fatal(err)
	}
	if !available {
		t.Skip("this PostgreSQL cannot JIT-compile (pg_jit_available() is false: no LLVM provider installed), so no read of it is compiled")
	}
	store, compiled := jitReportingStore(t, db)
	// Rows to read: an expression is compiled when it is first evaluated.
	for _, id := range []string{"a-poll", "b-poll", "c-poll"} {
		if err := store.CreatePoll(ctx, ledger.Poll{ID: id, Title: "T", Choices: []string{"x", "y"}, Eligible: []string{"p-1"}}); err != nil {
			t.Fatal(err)
		}
	}

	compiled.Store(0)
	all, err := store.Polls(ctx)
	if err != nil || len(all) != 3 {
		t.Fatalf("Polls: %d polls, %v; want 3", len(all), err)
	}
	if compiled.Load() == 0 {
		t.Fatal("the whole catalog's read, on sessions with every JIT threshold 0, was not reported compiled: " +
			"the server does not report its compilations at debug1, so this test cannot tell")
	}
	compiled.Store(0)
	page, err := store.PollsAfter(ctx, "", 1000)
	if err != nil || len(page) != 3 {
		t.Fatalf("PollsAfter: %d polls, %v; want 3", len(page), err)
	}
	if n := compiled.Load(); n != 0 {
		t.Fatalf("a page of the catalog was JIT-compiled by PostgreSQL (%d compilations reported): its read must run with jit off", n)
	}
	// The setting lasts the page's transaction only: the sessions
	// compile again afterwards.
	if _, err := store.Polls(ctx); err != nil || compiled.Load() == 0 {
		t.Fatalf("Polls after PollsAfter: %v, %d compilations; want the sessions' jit left on", err, compiled.Load())
	}
}

// jitReportingStore is a store on db whose sessions would JIT-compile any
// query (every JIT cost threshold 0) and report each compilation to the
// client (client_min_messages debug1); the counter it returns counts
// those reports.
func jitReportingStore(t *testing.T, db testenv.DB) (*ledger.Store, *atomic.Int64) {
	t.Helper()
	compiled := new(atomic.Int64)
	store, _ := storeOn(t, db.URL, func(cfg *pgxpool.Config) {
		for name, v := range map[string]string{"jit": "on", "jit_above_cost": "0", "jit_inline_above_cost": "0",
			"jit_optimize_above_cost": "0", "client_min_messages": "debug1"} {
			cfg.ConnConfig.RuntimeParams[name] = v
		}
		cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
			if strings.HasPrefix(n.Message, "time to inline:") {
				compiled.Add(1)
			}
		}
	})
	return store, compiled
}
