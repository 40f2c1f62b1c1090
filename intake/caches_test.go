package intake_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
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
	i := 0
	testenv.Eventually(t, bound, "intake to refuse the revoked token", func() error {
		i++
		if r := b.vote(t, b.token, "r"+strconv.Itoa(i), "p1", "a"); r.code != http.StatusUnauthorized {
			return fmt.Errorf("a vote with the revoked token answered %d", r.code)
		}
		return nil
	})
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
	accepted := int64(1)
	_, other := b.principal(t, "other")
	i := 0
	testenv.Eventually(t, 3*time.Second, "intake's catalog to hold the poll closed by the NOTIFY", func() bool {
		i++
		r := b.vote(t, other, "e"+strconv.Itoa(i), "p1", "a")
		if r.code == http.StatusUnprocessableEntity {
			wantProblem(t, r, http.StatusUnprocessableEntity)
			return true
		}
		if r.code != http.StatusAccepted {
			t.Fatalf("vote: %d %s", r.code, r.raw)
		}
		accepted++
		return false
	})
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
	// listeners are the pids of intake's LISTEN connections.
	listeners := func() []int32 {
		var pids []int32
		if err := db.Pool.QueryRow(ctx, `
SELECT coalesce(array_agg(pid), '{}') FROM pg_stat_activity
WHERE datname = current_database() AND query = 'LISTEN tally_catalog'`).Scan(&pids); err != nil {
			t.Fatal(err)
		}
		return pids
	}
	var killed []int32
	testenv.Eventually(t, 5*time.Second, "a LISTEN connection to kill", func() bool {
		killed = listeners()
		return len(killed) > 0
	})
	for _, pid := range killed {
		if _, err := db.Pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
			t.Fatal(err)
		}
	}
	// Wait for the listener to be back before closing the poll: a new
	// connection, not the one killed, which stays listed until it ended.
	testenv.Eventually(t, 10*time.Second, "the catalog listener to reconnect", func() bool {
		return slices.ContainsFunc(listeners(), func(pid int32) bool { return !slices.Contains(killed, pid) })
	})
	if err := b.store.ClosePoll(ctx, "p1", time.Now()); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 3*time.Second, "intake to refuse votes on the poll closed by the NOTIFY", func() error {
		if r := b.vote(t, b.token, testenv.RandomName("e"), "p1", "a"); r.code != http.StatusUnprocessableEntity {
			return fmt.Errorf("a vote answered %d", r.code)
		}
		return nil
	})
}
