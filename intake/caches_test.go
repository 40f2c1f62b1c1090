package intake_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"tally/internal/testenv"
	"tally/ledger"
)

// This file tests how fresh the revocations and the catalog held in
// memory stay: a revocation, a poll closed by NOTIFY, a lost LISTEN
// connection.

// TestRevocation: a principal revoked while intake runs is refused once
// intake heard of it, for votes and reads alike.
func TestRevocation(t *testing.T) {
	t.Parallel()
	const bound = 5 * time.Second
	b := setup(t)
	if r := b.vote(t, b.token, "e1", "p1", "a"); r.code != http.StatusAccepted {
		t.Fatalf("vote: %d %s", r.code, r.raw)
	}
	if err := b.store.RevokePrincipal(context.Background(), b.who.ID); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	for i := 0; ; i++ {
		sent := time.Since(revoked)
		r := b.vote(t, b.token, "r"+strconv.Itoa(i), "p1", "a")
		if r.code == http.StatusUnauthorized {
			break
		}
		if sent > bound {
			t.Fatalf("revoked token accepted in a request sent %s after the revocation: %d", sent, r.code)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := b.do(t, http.MethodGet, "/v1/votes/e1", b.token, "", nil); got.code != http.StatusUnauthorized {
		t.Fatalf("status with a revoked token: %d", got.code)
	}
}

// TestClosedPollByNotify closes a poll while intake runs; with the periodic
// reload far away, only the NOTIFY can tell intake.
func TestClosedPollByNotify(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config) { c.CatalogRefresh = time.Hour })
	if r := b.vote(t, b.token, "e0", "p1", "a"); r.code != http.StatusAccepted {
		t.Fatalf("vote: %d %s", r.code, r.raw)
	}
	if err := b.store.ClosePoll(context.Background(), "p1", time.Now()); err != nil {
		t.Fatal(err)
	}
	closed := time.Now()
	accepted := int64(1)
	_, other := b.principal(t, "other")
	for i := 1; ; i++ {
		r := b.vote(t, other, "e"+strconv.Itoa(i), "p1", "a")
		if r.code == http.StatusUnprocessableEntity {
			wantProblem(t, r, http.StatusUnprocessableEntity)
			break
		}
		if r.code != http.StatusAccepted {
			t.Fatalf("vote: %d %s", r.code, r.raw)
		}
		accepted++
		if time.Since(closed) > 3*time.Second {
			t.Fatal("closed poll still open in intake's catalog 3s after the NOTIFY")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := b.xlen(t); n != accepted {
		t.Fatalf("stream holds %d entries, want %d", n, accepted)
	}
	// A poll created while intake runs is served at once.
	b.poll(t, ledger.Poll{ID: "p2", Title: "New", Choices: []string{"x"}})
	if r := b.vote(t, b.token, "new", "p2", "x"); r.code != http.StatusAccepted {
		t.Fatalf("vote on a new poll: %d %s", r.code, r.raw)
	}
}

// TestCatalogListenerReconnects kills intake's LISTEN connection; the
// listener reconnects and a poll closed afterwards is still seen at once.
func TestCatalogListenerReconnects(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	rdb, prefix := testenv.Redis(t)
	b := setup(t, withDB(db), withRedis(rdb, prefix), func(c *config) { c.CatalogRefresh = time.Hour })
	ctx := context.Background()
	if r := b.vote(t, b.token, "e0", "p1", "a"); r.code != http.StatusAccepted {
		t.Fatalf("vote: %d %s", r.code, r.raw)
	}
	killed := int64(0)
	for deadline := time.Now().Add(5 * time.Second); killed == 0; {
		if err := db.Pool.QueryRow(ctx, `
SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE datname = current_database() AND query = 'LISTEN tally_catalog'`).Scan(&killed); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("no LISTEN connection found")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Wait for the listener to be back before closing the poll.
	for deadline := time.Now().Add(10 * time.Second); ; {
		var n int
		if err := db.Pool.QueryRow(ctx, `
SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query = 'LISTEN tally_catalog'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the catalog listener did not reconnect within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := b.store.ClosePoll(ctx, "p1", time.Now()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(3 * time.Second); ; {
		r := b.vote(t, b.token, testenv.RandomName("e"), "p1", "a")
		if r.code == http.StatusUnprocessableEntity {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("closed poll still accepted 3s after the NOTIFY: %d", r.code)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
