package ledger_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"tally/internal/testenv"
	"tally/ledger"
)

// TestWatchCatalog: a new poll and a new principal reach the watcher as
// what they are; a LISTEN connection killed under it is re-established, the
// watcher says so (everything may have changed), and later changes still
// arrive. A connection that listened resets the backoff, so each of
// several losses in a row is retried after the first, shortest wait. The
// watcher returns when its context ends.
func TestWatchCatalog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var logs testenv.LogBuffer
	store, err := ledger.New(b.db.Pool, ledger.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.ctx)
	changes := make(chan ledger.CatalogChange)
	var wg sync.WaitGroup
	wg.Go(func() {
		store.WatchCatalog(ctx, func(c ledger.CatalogChange) {
			select {
			case changes <- c:
			case <-ctx.Done():
			}
		})
	})
	defer testenv.WaitGroup(t, &wg, 10*time.Second, "WatchCatalog to return once its context ended")
	defer cancel()

	everything := ledger.CatalogChange{Polls: true, Principals: true}
	waitChange(t, changes, everything) // connected
	b.poll(t, "p1", "a", "b")
	waitChange(t, changes, ledger.CatalogChange{Polls: true})
	if _, _, err := b.store.AddPrincipal(b.ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	waitChange(t, changes, ledger.CatalogChange{Principals: true})
	if err := b.store.RetireCredentialKey(b.ctx, "k-0123456789abcdef"); err != nil {
		t.Fatal(err)
	}
	waitChange(t, changes, ledger.CatalogChange{Principals: true})

	const losses = 3
	for range losses {
		var killed int
		if err := b.db.Pool.QueryRow(b.ctx, `
SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE datname = current_database() AND query = 'LISTEN tally_catalog'`).Scan(&killed); err != nil {
			t.Fatal(err)
		}
		if killed != 1 {
			t.Fatalf("terminated %d LISTEN connections, want 1", killed)
		}
		waitChange(t, changes, everything) // reconnected
	}
	if n := strings.Count(logs.String(), "catalog listener lost; reconnecting"); n != losses {
		t.Errorf("%d reconnections logged, want %d:\n%s", n, losses, logs.String())
	}
	if n := strings.Count(logs.String(), "backoff=100ms"); n != losses {
		t.Errorf("%d of %d reconnections waited the first backoff (100ms); the backoff was not reset after a connection that listened:\n%s", n, losses, logs.String())
	}
	if err := b.store.ClosePoll(b.ctx, "p1", time.Now()); err != nil {
		t.Fatal(err)
	}
	waitChange(t, changes, ledger.CatalogChange{Polls: true})

	cancel()
	testenv.WaitGroup(t, &wg, 5*time.Second, "WatchCatalog to return once its context ended")
}

// waitChange reads changes until want arrives; others (a poll's choices
// notify apart from the poll) are skipped.
func waitChange(t *testing.T, changes <-chan ledger.CatalogChange, want ledger.CatalogChange) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case c := <-changes:
			if c == want {
				return
			}
		case <-timeout:
			t.Fatalf("no change %+v within 10s", want)
		}
	}
}
