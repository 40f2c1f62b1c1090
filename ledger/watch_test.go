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

// TestWatchCatalog: a new poll, a revoked principal and a retired key
// reach the watcher as the seq of their change, and a write that changed
// nothing reaches it not at all; a LISTEN connection
// killed under it is re-established, the watcher says so (0: anything may
// have changed), and later changes still arrive. A connection that
// listened resets the backoff, so each of several losses in a row is
// retried after the first, shortest wait. The watcher returns when its
// context ends.
func TestWatchCatalog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var logs testenv.LogBuffer
	store, err := ledger.New(b.db.Pool, ledger.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.ctx)
	changes := make(chan int64)
	var wg sync.WaitGroup
	wg.Go(func() {
		store.WatchCatalog(ctx, func(seq int64) {
			select {
			case changes <- seq:
			case <-ctx.Done():
			}
		})
	})
	defer testenv.WaitGroup(t, &wg, 10*time.Second, "WatchCatalog to return once its context ended")
	defer cancel()

	waitChange(t, changes, 0) // connected
	b.poll(t, "p1", "a", "b")
	waitChange(t, changes, lastChange(t, b))
	ps, err := b.store.AddPrincipals(b.ctx, []string{"alice"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.store.RevokePrincipal(b.ctx, ps[0].ID); err != nil {
		t.Fatal(err)
	}
	waitChange(t, changes, lastChange(t, b))
	if err := b.store.RetireCredentialKey(b.ctx, "k-0123456789abcdef"); err != nil {
		t.Fatal(err)
	}
	waitChange(t, changes, lastChange(t, b))

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
		waitChange(t, changes, 0) // reconnected
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
	waitChange(t, changes, lastChange(t, b))
	// A write that changed nothing notifies nothing: the next notification
	// is the next change's.
	if err := b.store.ClosePoll(b.ctx, "p1", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := b.store.RetireCredentialKey(b.ctx, "k-0123456789abcdef"); err != nil {
		t.Fatal(err)
	}
	if err := b.store.RetireCredentialKey(b.ctx, "k-fedcba9876543210"); err != nil {
		t.Fatal(err)
	}
	select {
	case seq := <-changes:
		if want := lastChange(t, b); seq != want {
			t.Fatalf("notified %d after writes that changed nothing, want only the next change's %d", seq, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no notification of the key retired within 10s")
	}

	cancel()
	testenv.WaitGroup(t, &wg, 5*time.Second, "WatchCatalog to return once its context ended")
}

// lastChange is the seq of the last change of the catalog's log.
func lastChange(t *testing.T, b bundle) int64 {
	t.Helper()
	seq, err := b.store.CatalogHorizon(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// waitChange reads changes until want arrives.
func waitChange(t *testing.T, changes <-chan int64, want int64) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case c := <-changes:
			if c == want {
				return
			}
		case <-timeout:
			t.Fatalf("no notification of change %d within 10s", want)
		}
	}
}
