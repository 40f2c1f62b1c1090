package intake_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"tally/intake"
	"tally/internal/testenv"
	"tally/ledger"
	"tally/stream"
)

// This file tests how fresh the token and catalog caches stay: a
// revocation, a poll closed by NOTIFY, a lost LISTEN connection.

func TestRevocation(t *testing.T) {
	t.Parallel()
	const ttl = 500 * time.Millisecond
	b := setup(t, func(c *intake.Config) { c.AuthTTL = ttl })
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
		if sent > ttl {
			t.Fatalf("revoked token accepted in a request sent %s after the revocation: %d", sent, r.code)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := b.do(t, http.MethodGet, "/v1/votes/e1", b.token, "", nil); got.code != http.StatusUnauthorized {
		t.Fatalf("status with a revoked token: %d", got.code)
	}
}

// TestRevocationTTL checks the cache's TTL alone, with no NOTIFY listener:
// the handler is used without Serve.
func TestRevocationTTL(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	rdb, prefix := testenv.Redis(t)
	store, _ := ledger.New(db.Pool, ledger.Config{})
	keys, _ := stream.NewKeys(prefix, 1)
	const ttl = time.Second
	srv, err := intake.New(intake.Config{AuthTTL: ttl}, store, rdb, keys, testLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	p, token, err := store.AddPrincipal(context.Background(), "voter")
	if err != nil {
		t.Fatal(err)
	}
	get := func() int {
		req, _ := http.NewRequest(http.MethodGet, "/v1/votes/x", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		return serve(t, srv.Handler(), req).Code
	}
	cached := time.Now()
	if c := get(); c != http.StatusNotFound {
		t.Fatalf("status before revocation: %d", c)
	}
	if err := store.RevokePrincipal(context.Background(), p.ID); err != nil {
		t.Fatal(err)
	}
	if c := get(); c != http.StatusNotFound && time.Since(cached) < ttl {
		t.Fatalf("the cache did not answer within its TTL: %d", c)
	}
	time.Sleep(ttl + 50*time.Millisecond)
	if c := get(); c != http.StatusUnauthorized {
		t.Fatalf("revoked token accepted after the TTL: %d", c)
	}
}

// TestClosedPollByNotify closes a poll while intake runs; with the periodic
// reload far away, only the NOTIFY can tell intake.
func TestClosedPollByNotify(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *intake.Config) { c.CatalogRefresh = time.Hour })
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
	b := setupOn(t, db, rdb, prefix, func(c *intake.Config) { c.CatalogRefresh = time.Hour })
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
