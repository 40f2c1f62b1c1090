package intake_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"tally/internal/testenv"
	"tally/ledger"
)

// This file tests the admin routes when something is missing or failing:
// PostgreSQL stopped, a revocation made at another intake, an intake
// without a credential key or a database login that may not manage
// polls, and an admin past its read budget.

// adminWrite is one admin write request; label names it in the test's
// messages.
type adminWrite struct{ label, path, body string }

// TestAdminPostgresDown stops a private PostgreSQL under an intake while
// each admin write is under way (waiting for a lock the test holds), then
// sends each again while it is stopped: every answer is 503 unavailable
// with Retry-After, never 200 or 201, and nothing is stored. Once
// PostgreSQL is back, the refused create answers 201, then 200.
func TestAdminPostgresDown(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	db := pg.Migrated("tally")
	rdb, prefix := testenv.Redis(t)
	// Intake's pool has a connection for each write under way, beside
	// its listener's (a pool's default is 4 at least), and the writes
	// wait for the lock until PostgreSQL stops, not for the default 3s.
	// The admin's reads are not what is tested: the wait for PostgreSQL
	// to come back sends the create every 10ms.
	b := setup(t, withDB(db), withRedis(rdb, prefix), withIntakeURL(pg.URL("tally")+"&pool_max_conns=16"), func(c *config) {
		c.RequestTimeout = 8 * time.Second
		c.ReadRate, c.ReadBurst = 1000, 1000
	})
	ctx := context.Background()
	_, admin := b.admin(t, "app")
	target, _ := b.signed(t, "target", time.Time{})
	const create = `{"poll_id":"outage","title":"Made during the outage?","choices":["x","y"]}`
	writes := []adminWrite{
		{"create", "/v1/polls", create},
		{"close", "/v1/polls/p1/close", ""},
		{"add", "/v1/principals", `{"names":["outage-ann","outage-bob"]}`},
		{"revoke", "/v1/principals/" + target.ID + "/revoke", ""},
	}
	wantRefused := func(w adminWrite, r reply) {
		t.Helper()
		wantProblemType(t, r, http.StatusServiceUnavailable, "unavailable")
		if r.header.Get("Retry-After") == "" || !strings.Contains(r.str("detail"), "may not be stored") {
			t.Fatalf("%s: Retry-After %q, detail %q; want a Retry-After and the detail of a write not stored",
				w.label, r.header.Get("Retry-After"), r.str("detail"))
		}
	}

	// Writes under way when PostgreSQL stops: a transaction of the test
	// holds the tables they change, which PostgreSQL's stop ends.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) // its connection dies with the server: the error says no more
	if _, err := tx.Exec(ctx, `LOCK TABLE polls, principals IN SHARE ROW EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	replies := make([]reply, len(writes))
	var wg sync.WaitGroup
	for i, w := range writes {
		wg.Go(func() { replies[i] = b.adminDo(t, http.MethodPost, w.path, admin, w.body) })
	}
	testenv.Eventually(t, 5*time.Second, "the four writes wait for the test's lock", func() bool {
		var waiting int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`).
			Scan(&waiting)
		return err == nil && waiting == len(writes)
	})
	pg.Stop()
	wg.Wait()
	for i, w := range writes {
		wantRefused(w, replies[i])
	}
	// Adding principals is the one write a retry repeats: its answer says
	// what a lost commit left.
	if d := replies[2].str("detail"); !strings.Contains(d, "not idempotent") || !strings.Contains(d, "tally principal list") {
		t.Fatalf("add: detail %q; want it to say a retry adds principals again, and how to find those of a lost answer", d)
	}
	// Sent again while it is stopped: intake knows, and asks it at most
	// once a second.
	for _, w := range writes {
		wantRefused(w, b.adminDo(t, http.MethodPost, w.path, admin, w.body))
	}

	pg.Start()
	testenv.Eventually(t, 20*time.Second, "PostgreSQL answers the test again", func() bool {
		_, err := b.store.Principals(ctx)
		return err == nil
	})
	if _, err := b.store.Poll(ctx, "outage"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("poll outage, whose create was refused: %v, want not found", err)
	}
	if p1, err := b.store.Poll(ctx, "p1"); err != nil || p1.ClosesAt != nil {
		t.Fatalf("p1, whose close was refused: closes at %v (%v), want open", p1.ClosesAt, err)
	}
	ps, err := b.store.Principals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if strings.HasPrefix(p.Name, "outage-") {
			t.Fatalf("principal %s (%s) added by a refused request", p.ID, p.Name)
		}
	}
	if p, err := b.store.Principal(ctx, target.ID); err != nil || p.RevokedAt != nil {
		t.Fatalf("the target of a refused revoke: revoked at %v (%v), want not revoked", p.RevokedAt, err)
	}

	var r reply
	testenv.Eventually(t, 20*time.Second, "intake answers the create once PostgreSQL is back", func() bool {
		r = b.adminDo(t, http.MethodPost, "/v1/polls", admin, create)
		return r.code != http.StatusServiceUnavailable
	})
	if r.code != http.StatusCreated {
		t.Fatalf("the create refused during the outage, sent again: %d %s, want 201", r.code, r.raw)
	}
	if again := b.adminDo(t, http.MethodPost, "/v1/polls", admin, create); again.code != http.StatusOK {
		t.Fatalf("the same create once more: %d %s, want 200", again.code, again.raw)
	}
}

// TestAdminRevokeAtAnotherIntake runs two intakes on one database and
// Redis prefix, sharing their credential key: a voter revoked over HTTP at
// intake A is refused at intake B within a second, while another voter
// still votes there.
func TestAdminRevokeAtAnotherIntake(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	rdb, prefix := testenv.Redis(t)
	a := setup(t, withDB(db), withRedis(rdb, prefix))
	b := setup(t, withDB(db), withRedis(rdb, prefix), withKeyOf(a))
	voter, token := a.signed(t, "voter", time.Time{})
	_, other := a.signed(t, "other", time.Time{})
	_, admin := a.admin(t, "app")
	wantAccepted(t, a.vote(t, token, "e1", "p1", "a"), "e1", ledger.StatusPending)
	wantAccepted(t, b.vote(t, token, "e2", "p1", "a"), "e2", ledger.StatusPending)

	path := "/v1/principals/" + voter.ID + "/revoke"
	r := a.adminDo(t, http.MethodPost, path, admin, "")
	if r.code != http.StatusOK || r.str("principal_id") != voter.ID || r.str("revoked_at") == "" {
		t.Fatalf("revoke at intake A: %d %s, want 200 with revoked_at", r.code, r.raw)
	}
	// Intake A, which answered the revoke, refuses the voter at once.
	wantInvalidToken(t, "the revoked voter at the intake that revoked it", a.vote(t, token, "e0", "p1", "a"))
	if again := a.adminDo(t, http.MethodPost, path, admin, ""); again.code != http.StatusOK || again.str("revoked_at") != r.str("revoked_at") {
		t.Fatalf("revoke again: %d %s, want 200 with revoked_at %s", again.code, again.raw, r.str("revoked_at"))
	}
	testenv.Eventually(t, 10*time.Second, "intake B refuses the voter revoked at intake A", func() bool {
		return b.vote(t, token, "e3", "p1", "a").code == http.StatusUnauthorized
	})
	wantInvalidToken(t, "the revoked voter at intake B", b.vote(t, token, "e4", "p1", "a"))
	wantAccepted(t, b.vote(t, other, "o1", "p1", "b"), "o1", ledger.StatusPending)
}

// TestAdminNotConfigured: an intake without a credential key adds nobody,
// one whose database login is granted tally_daemon only changes nothing,
// each answering 501 not-configured; one granted tally_admin does each
// write, and admin_actions names its login beside the admin.
func TestAdminNotConfigured(t *testing.T) {
	t.Parallel()
	t.Run("no credential key", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(c *config) { c.TokenKey = nil })
		_, admin := b.admin(t, "app")
		before := principalCount(t, b)
		r := b.adminDo(t, http.MethodPost, "/v1/principals", admin, `{"names":["ann"]}`)
		wantProblemType(t, r, http.StatusNotImplemented, "not-configured")
		if n := principalCount(t, b); n != before {
			t.Fatalf("%d principals after the refused add, want %d", n, before)
		}
	})
	t.Run("daemon login", func(t *testing.T) {
		t.Parallel()
		db := testenv.Postgres(t)
		rdb, prefix := testenv.Redis(t)
		b := setup(t, withDB(db), withRedis(rdb, prefix), withIntakeURL(testenv.DaemonLogin(t, db)))
		ctx := context.Background()
		_, admin := b.admin(t, "app")
		target, _ := b.signed(t, "target", time.Time{})
		before := principalCount(t, b)
		for _, w := range []adminWrite{
			{"create", "/v1/polls", `{"poll_id":"denied","title":"Denied?","choices":["x","y"]}`},
			{"close", "/v1/polls/p1/close", ""},
			{"add", "/v1/principals", `{"names":["ann"]}`},
			{"revoke", "/v1/principals/" + target.ID + "/revoke", ""},
		} {
			r := b.adminDo(t, http.MethodPost, w.path, admin, w.body)
			if r.code != http.StatusNotImplemented || r.str("type") != "urn:tally:problem:not-configured" {
				t.Errorf("%s as tally_daemon: %d %s, want 501 not-configured", w.label, r.code, r.raw)
			}
		}
		if _, err := b.store.Poll(ctx, "denied"); !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("poll denied: %v, want not found", err)
		}
		if p1, err := b.store.Poll(ctx, "p1"); err != nil || p1.ClosesAt != nil {
			t.Errorf("p1: closes at %v (%v), want open", p1.ClosesAt, err)
		}
		if n := principalCount(t, b); n != before {
			t.Errorf("%d principals after the refused add, want %d", n, before)
		}
		if p, err := b.store.Principal(ctx, target.ID); err != nil || p.RevokedAt != nil {
			t.Errorf("the target: revoked at %v (%v), want not revoked", p.RevokedAt, err)
		}
	})
	t.Run("admin login", func(t *testing.T) {
		t.Parallel()
		db := testenv.Postgres(t)
		rdb, prefix := testenv.Redis(t)
		loginURL := testenv.AdminLogin(t, db)
		b := setup(t, withDB(db), withRedis(rdb, prefix), withIntakeURL(loginURL))
		who, admin := b.admin(t, "app")
		target, _ := b.signed(t, "target", time.Time{})
		var want []string
		for _, w := range []adminWrite{
			{"poll.create topic", "/v1/polls", `{"poll_id":"topic","title":"Topic?","choices":["x","y"]}`},
			{"poll.close topic", "/v1/polls/topic/close", ""},
			{"principal.add", "/v1/principals", `{"names":["ann"]}`},
			{"principal.revoke " + target.ID, "/v1/principals/" + target.ID + "/revoke", ""},
		} {
			r := b.adminDo(t, http.MethodPost, w.path, admin, w.body)
			if r.code != http.StatusOK && r.code != http.StatusCreated {
				t.Fatalf("%s as tally_admin: %d %s", w.label, r.code, r.raw)
			}
			if w.label == "principal.add" {
				added, _ := r.body["principals"].([]any)
				if len(added) != 1 {
					t.Fatalf("add answered %s, want one principal", r.raw)
				}
				w.label += " " + added[0].(map[string]any)["principal_id"].(string)
			}
			want = append(want, w.label)
		}
		u, err := url.Parse(loginURL)
		if err != nil {
			t.Fatal(err)
		}
		login := u.User.Username()
		rows, err := b.db.Pool.Query(context.Background(),
			`SELECT action || ' ' || target, db_user FROM admin_actions WHERE principal_id = $1 ORDER BY id`, who.ID)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		var user string
		for rows.Next() {
			var action string
			if err := rows.Scan(&action, &user); err != nil {
				t.Fatal(err)
			}
			if user != login {
				t.Errorf("admin_actions: %s by db_user %q, want the intake's login %q", action, user, login)
			}
			got = append(got, action)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("admin_actions by the admin: %v, want %v", got, want)
		}
	})
}

// TestAdminSharesReadBudget: an admin request spends a read of its
// principal's budget, as an event status read does; past it the admin
// gets 429 rate-limited with Retry-After, while another admin still reads.
func TestAdminSharesReadBudget(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config) { c.ReadRate, c.ReadBurst = 0.01, 2 })
	_, admin := b.admin(t, "app")
	_, other := b.admin(t, "other")
	if r := b.status(t, admin, "none"); r.code != http.StatusNotFound {
		t.Fatalf("the admin's status read of an unknown event: %d %s, want 404", r.code, r.raw)
	}
	if r := b.adminDo(t, http.MethodGet, "/v1/polls", admin, ""); r.code != http.StatusOK {
		t.Fatalf("the admin's second read: %d %s, want 200", r.code, r.raw)
	}
	r := b.adminDo(t, http.MethodGet, "/v1/polls", admin, "")
	wantProblemType(t, r, http.StatusTooManyRequests, "rate-limited")
	if r.header.Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}
	if r := b.adminDo(t, http.MethodGet, "/v1/polls", other, ""); r.code != http.StatusOK {
		t.Fatalf("another admin's read: %d %s, want 200 (the budget is each principal's)", r.code, r.raw)
	}
}

// principalCount is the number of principals in b's database.
func principalCount(t *testing.T, b *bundle) int {
	t.Helper()
	ps, err := b.store.Principals(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return len(ps)
}
