package migrations_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"tally/internal/testenv"
)

// insertEventSQL writes one ledger row the way no tally code does: around
// the ledger's own checks.
const insertEventSQL = `
INSERT INTO poll_events (poll_id, candidate_id, principal_id, client_event_id, fingerprint, received_at, ballot)
VALUES ($1, $2, $3, $4, '\x00', now(), $5)`

// TestPollEventsIDCheck: the ledger refuses a row whose poll or principal
// id breaks the id rule, and takes the rows tally writes: a candidate, or
// a ballot with an empty candidate_id.
func TestPollEventsIDCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.Postgres(t)
	long := strings.Repeat("x", 65)
	for _, tc := range []struct {
		name                         string
		poll, cand, principal, event string
		ballot                       *string
		ok                           bool
	}{
		{name: "a candidate", poll: "p1", cand: "a", principal: "o-" + strings.Repeat("A", 40), event: "e1", ok: true},
		{name: "a ballot", poll: "p1", cand: "", principal: "alice", event: "e2", ballot: ptr(`["a","b"]`), ok: true},
		{name: "64 characters", poll: strings.Repeat("p", 64), cand: "a", principal: "alice", event: "e3", ok: true},
		{name: "poll id with a space", poll: "p 1", cand: "a", principal: "alice", event: "e4"},
		{name: "poll id of 65", poll: long, cand: "a", principal: "alice", event: "e5"},
		{name: "empty principal", poll: "p1", cand: "a", principal: "", event: "e6"},
		{name: "principal with a dot", poll: "p1", cand: "a", principal: "al.ice", event: "e7"},
		{name: "poll id not ASCII", poll: "pé", cand: "a", principal: "alice", event: "e10"},
		{name: "principal with a newline after", poll: "p1", cand: "a", principal: "alice\n", event: "e11"},
		{name: "principal of 65", poll: "p1", cand: "a", principal: long, event: "e12"},
	} {
		_, err := db.Pool.Exec(ctx, insertEventSQL, tc.poll, tc.cand, tc.principal, tc.event, tc.ballot)
		var pgErr *pgconn.PgError
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case !tc.ok && err == nil:
			t.Errorf("%s: taken, want the id check to refuse it", tc.name)
		case !tc.ok && (!errors.As(err, &pgErr) || pgErr.Code != "23514" || pgErr.ConstraintName != "poll_events_ids_check"):
			t.Errorf("%s: %v, want a violation of poll_events_ids_check (23514)", tc.name, err)
		}
	}
}

// TestPollEventsIDCheckNamesTheRow: migration 00019 over a ledger that
// holds a row breaking the rule fails, naming the row, and leaves no
// check behind.
func TestPollEventsIDCheckNamesTheRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, p := emptyProvider(t)
	if _, err := p.UpTo(ctx, 18); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, insertEventSQL, "p1", "a", "bad id", "e1", nil); err != nil {
		t.Fatal(err)
	}
	_, err := p.UpTo(ctx, 19)
	if err == nil || !strings.Contains(err.Error(), `principal_id 'bad id'`) {
		t.Fatalf("migrating a ledger with a bad id: %v, want an error naming it", err)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_constraint WHERE conname = 'poll_events_ids_check'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d checks left after the failed migration (%v)", n, err)
	}
}

// TestIDChecksUnbounded: every check of an id in the schema says the id
// rule without a bounded repetition, which PostgreSQL runs tens of times
// slower, and still refuses an id of 65 characters and takes one of
// 64.
func TestIDChecksUnbounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.Postgres(t)
	rows, err := db.Pool.Query(ctx, `
SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint
WHERE contype = 'c' AND pg_get_constraintdef(oid) LIKE '%A-Za-z0-9%' ORDER BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var table, name, def string
		if err := rows.Scan(&table, &name, &def); err != nil {
			t.Fatal(err)
		}
		n++
		if strings.Contains(def, "{") {
			t.Errorf("%s's %s has a bounded repetition: %s", table, name, def)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 5 {
		t.Errorf("%d checks of an id, want 5 (polls, poll_choices, principals, credential_key_retirements, poll_events)", n)
	}
	for _, tc := range []struct {
		id string
		ok bool
	}{{strings.Repeat("q", 64), true}, {strings.Repeat("q", 65), false}, {"", false}, {"q q", false}} {
		_, err := db.Pool.Exec(ctx, `INSERT INTO polls (id, title) VALUES ($1, 't')`, tc.id)
		if (err == nil) != tc.ok {
			t.Errorf("poll id %q: %v, want taken %v", tc.id, err, tc.ok)
		}
	}
}

func ptr(s string) *string { return &s }
