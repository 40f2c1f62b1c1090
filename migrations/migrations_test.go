package migrations_test

import (
	"context"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"tally/internal/testenv"
	"tally/migrations"
)

func tables(t *testing.T, db testenv.DB) []string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `
SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'goose_db_version' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// TestUpResetUp: the migrations go up from empty, back down to nothing,
// and up again cleanly.
func TestUpResetUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, p := emptyProvider(t)
	want := []string{"admin_actions", "catalog_changes", "catalog_changes_trimmed", "credential_key_retirements", "poll_ballots", "poll_choices", "poll_definitions", "poll_eligible", "poll_event_rejections", "poll_events", "poll_log_checkpoints", "poll_log_heads", "poll_log_leaves", "poll_log_tiles", "poll_pairwise", "poll_results", "polls", "principals"}
	for round := 0; round < 2; round++ {
		if _, err := p.Up(ctx); err != nil {
			t.Fatalf("round %d up: %v", round, err)
		}
		if got := tables(t, db); len(got) != len(want) {
			t.Fatalf("round %d: tables %v, want %v", round, got, want)
		}
		if _, err := p.DownTo(ctx, 0); err != nil {
			t.Fatalf("round %d reset: %v", round, err)
		}
		if got := tables(t, db); len(got) != 0 {
			t.Fatalf("round %d: tables left after reset: %v", round, got)
		}
		var fns int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_proc WHERE pronamespace = 'public'::regnamespace`).Scan(&fns); err != nil || fns != 0 {
			t.Fatalf("round %d: %d functions left after reset (%v)", round, fns, err)
		}
	}
	// Down one step at a time from the top works too.
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := p.Down(ctx); err != nil {
			break // no more migrations to roll back
		}
	}
	if got := tables(t, db); len(got) != 0 {
		t.Fatalf("tables left after stepping down: %v", got)
	}
}

// TestFilesApplyWithPlainGoose: the files in this directory, read from disk
// the way the goose command-line tool reads them, give the same schema.
func TestFilesApplyWithPlainGoose(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.EmptyPostgres(t)
	sqlDB := stdlib.OpenDBFromPool(db.Pool)
	defer sqlDB.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, sqlDB, os.DirFS("."))
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Up(ctx)
	if err != nil {
		t.Fatal(err)
	}
	embedded, err := migrations.NewProvider(sqlDB)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(embedded.ListSources()) {
		t.Fatalf("applied %d files from disk, %d are embedded", len(res), len(embedded.ListSources()))
	}
	if pending, err := embedded.HasPending(ctx); err != nil || pending {
		t.Fatalf("embedded migrations pending after the files were applied: %v %v", pending, err)
	}
}

// TestIDsCompareBytewise: migration 3 gives every id column the C
// collation, keeps the rows, and its down step gives the default back.
func TestIDsCompareBytewise(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, p := emptyProvider(t)
	collations := func() map[string]int {
		rows, err := db.Pool.Query(ctx, `
SELECT coalesce(collation_name, 'default'), count(*) FROM information_schema.columns
WHERE table_schema = 'public' AND data_type = 'text'
  AND (column_name IN ('id', 'poll_id', 'candidate_id', 'principal_id', 'client_event_id'))
GROUP BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct {
			k string
			n int
		}, error) {
			var v struct {
				k string
				n int
			}
			return v, r.Scan(&v.k, &v.n)
		})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]int{}
		for _, v := range out {
			m[v.k] = v.n
		}
		return m
	}
	if _, err := p.UpTo(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `
INSERT INTO polls (id, title) VALUES ('Lunch', 'x');
INSERT INTO poll_choices VALUES ('Lunch', 'a', 1), ('Lunch', 'B', 0);
INSERT INTO poll_events (poll_id, candidate_id, principal_id, client_event_id, fingerprint, received_at)
    VALUES ('Lunch', 'B', 'u1', 'k1', '\x00'::bytea, now());`); err != nil {
		t.Fatal(err)
	}
	if c := collations(); c["C"] != 0 {
		t.Fatalf("before migration 3: %v", c)
	}
	if _, err := p.UpTo(ctx, 3); err != nil {
		t.Fatal(err)
	}
	// 16 id columns across the seven tables.
	if c := collations(); c["C"] != 16 || len(c) != 1 {
		t.Fatalf("after migration 3: %v, want 16 columns with collation C and no other", c)
	}
	var first string
	var events int
	if err := db.Pool.QueryRow(ctx, `SELECT (SELECT candidate_id FROM poll_choices ORDER BY candidate_id LIMIT 1),
		(SELECT count(*) FROM poll_events WHERE poll_id = 'Lunch' AND principal_id = 'u1')`).Scan(&first, &events); err != nil {
		t.Fatal(err)
	}
	if first != "B" || events != 1 {
		t.Fatalf("after migration 3: first choice %q (want B, bytewise), %d events (want 1)", first, events)
	}
	if _, err := p.DownTo(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if c := collations(); c["C"] != 0 {
		t.Fatalf("after migration 3 down: %v", c)
	}
}

// TestDaemonRoleGrants: migration 6 gives tally_daemon reads everywhere,
// appends to the append-only tables, updates only to the projection and
// the log heads; its down step takes this database's grants back and
// leaves the role, which the server's other databases may still use.
func TestDaemonRoleGrants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, p := emptyProvider(t)
	// What tally_daemon may do to each table, as has_table_privilege says.
	// privileges are role's on each table; UPDATE is any column's.
	privileges := func(role string) map[string]string {
		rows, err := db.Pool.Query(ctx, `
SELECT tablename,
    concat_ws(',', CASE WHEN has_table_privilege($1, c.oid, 'SELECT') THEN 'SELECT' END,
        CASE WHEN has_table_privilege($1, c.oid, 'INSERT') THEN 'INSERT' END,
        CASE WHEN has_any_column_privilege($1, c.oid, 'UPDATE') THEN 'UPDATE' END,
        CASE WHEN has_table_privilege($1, c.oid, 'DELETE') THEN 'DELETE' END,
        CASE WHEN has_table_privilege($1, c.oid, 'TRUNCATE') THEN 'TRUNCATE' END)
FROM pg_tables t JOIN pg_class c ON c.relname = t.tablename AND c.relnamespace = 'public'::regnamespace
WHERE schemaname = 'public' AND tablename <> 'goose_db_version'`, role)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for rows.Next() {
			var table, privs string
			if err := rows.Scan(&table, &privs); err != nil {
				t.Fatal(err)
			}
			m[table] = privs
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"polls": "SELECT", "poll_choices": "SELECT", "poll_eligible": "SELECT", "principals": "SELECT", "credential_key_retirements": "SELECT",
		"poll_events": "SELECT,INSERT", "poll_event_rejections": "SELECT,INSERT",
		"poll_log_tiles": "SELECT,INSERT", "poll_log_checkpoints": "SELECT,INSERT", "poll_log_leaves": "SELECT,INSERT", "poll_definitions": "SELECT,INSERT",
		"poll_results": "SELECT,INSERT,UPDATE", "poll_log_heads": "SELECT,INSERT,UPDATE", "admin_actions": "",
		"poll_pairwise": "SELECT,INSERT,UPDATE", "poll_ballots": "SELECT,INSERT,UPDATE",
		"catalog_changes": "SELECT", "catalog_changes_trimmed": "SELECT",
	}
	// tally_admin is tally_daemon that may also add polls and principals,
	// close polls (UPDATE of closes_at alone), revoke principals (of
	// revoked_at alone) and retire keys, and read admin_actions, which
	// only the triggers write.
	wantAdmin := maps.Clone(want)
	maps.Copy(wantAdmin, map[string]string{
		"polls": "SELECT,INSERT,UPDATE", "poll_choices": "SELECT,INSERT", "poll_eligible": "SELECT,INSERT",
		"principals": "SELECT,INSERT,UPDATE", "credential_key_retirements": "SELECT,INSERT", "admin_actions": "SELECT",
	})
	for role, want := range map[string]map[string]string{"tally_daemon": want, "tally_admin": wantAdmin} {
		got := privileges(role)
		if len(got) != len(want) {
			t.Fatalf("%s's privileges %v, want %v", role, got, want)
		}
		for table, w := range want {
			if got[table] != w {
				t.Errorf("%s on %s: %q, want %q", role, table, got[table], w)
			}
		}
	}
	var columns []string
	if err := db.Pool.QueryRow(ctx, `
SELECT array_agg(table_name || '.' || column_name ORDER BY 1) FROM information_schema.column_privileges
WHERE grantee = 'tally_admin' AND privilege_type = 'UPDATE'`).Scan(&columns); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(columns, []string{"polls.closes_at", "principals.revoked_at"}) {
		t.Errorf("tally_admin may UPDATE %v, want polls.closes_at and principals.revoked_at only", columns)
	}
	var owns bool
	if err := db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_class
		WHERE relnamespace = 'public'::regnamespace AND relowner = 'tally_daemon'::regrole)`).Scan(&owns); err != nil || owns {
		t.Fatalf("tally_daemon owns a table: %v (%v)", owns, err)
	}
	if _, err := p.DownTo(ctx, 5); err != nil {
		t.Fatal(err)
	}
	for table, privs := range privileges("tally_daemon") {
		if privs != "" {
			t.Errorf("after migration 6 down, tally_daemon keeps %s on %s", privs, table)
		}
	}
	var role int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_roles WHERE rolname = 'tally_daemon'`).Scan(&role); err != nil || role != 1 {
		t.Fatalf("after migration 6 down: %d roles tally_daemon (%v), want the role kept", role, err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again with the role already there: %v", err)
	}
}

// TestPublicResults: migration 8 gives every poll a public_results flag,
// false for the polls already there, which tally_daemon reads with the
// rest of a poll; its down step removes it and keeps the polls.
func TestPublicResults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, p := emptyProvider(t)
	if _, err := p.UpTo(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO polls (id, title) VALUES ('before', 'x')`); err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 8); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO polls (id, title, public_results) VALUES ('after', 'x', true)`); err != nil {
		t.Fatal(err)
	}
	var public []string
	rows, err := db.Pool.Query(ctx, `SELECT id FROM polls WHERE public_results ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	if public, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || len(public) != 1 || public[0] != "after" {
		t.Fatalf("public polls after migration 8: %v (%v), want [after]: a poll made before stays not public", public, err)
	}
	var reads bool
	if err := db.Pool.QueryRow(ctx, `SELECT has_column_privilege('tally_daemon', 'polls', 'public_results', 'SELECT')`).Scan(&reads); err != nil || !reads {
		t.Fatalf("tally_daemon may read polls.public_results: %v (%v), want true", reads, err)
	}
	if _, err := p.DownTo(ctx, 7); err != nil {
		t.Fatal(err)
	}
	var polls, cols int
	if err := db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM polls),
		(SELECT count(*) FROM information_schema.columns WHERE table_name = 'polls' AND column_name = 'public_results')`).Scan(&polls, &cols); err != nil {
		t.Fatal(err)
	}
	if polls != 2 || cols != 0 {
		t.Fatalf("after migration 8 down: %d polls (want 2), %d public_results columns (want 0)", polls, cols)
	}
}

// TestCredentialValidityKeepsRows: migration 14 applied to a database
// holding principals takes an OpenID Connect subject's made-up role away
// (its issuer's tokens say its role) and keeps every other's; going down
// gives it the role it had.
func TestCredentialValidityKeepsRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, p := emptyProvider(t)
	if _, err := p.UpTo(ctx, 13); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `
INSERT INTO principals (id, name, role) VALUES ('p-admin', 'ops', 'admin');
INSERT INTO principals (id, name, revoked_at) VALUES ('o-subject', 'OpenID Connect subject', now())`); err != nil {
		t.Fatal(err)
	}
	roles := func() map[string]*string {
		rows, err := db.Pool.Query(ctx, `SELECT id, role FROM principals`)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]*string{}
		var id string
		var role *string
		if _, err := pgx.ForEachRow(rows, []any{&id, &role}, func() error { m[id] = role; return nil }); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if _, err := p.UpTo(ctx, 14); err != nil {
		t.Fatalf("up to 14 with principals: %v", err)
	}
	if got := roles(); got["o-subject"] != nil || got["p-admin"] == nil || *got["p-admin"] != "admin" {
		t.Fatalf("roles after migration 14: %v; want none for o-subject, admin for p-admin", got)
	}
	if _, err := p.DownTo(ctx, 13); err != nil {
		t.Fatalf("down to 13: %v", err)
	}
	if got := roles(); got["o-subject"] == nil || *got["o-subject"] != "voter" {
		t.Fatalf("roles after going down: %v; want o-subject's back", got)
	}
}

// emptyProvider is an empty database of the test's own and the embedded
// migrations' provider over it, none applied.
func emptyProvider(t *testing.T) (testenv.DB, *goose.Provider) {
	t.Helper()
	db := testenv.EmptyPostgres(t)
	sqlDB := stdlib.OpenDBFromPool(db.Pool)
	t.Cleanup(func() { sqlDB.Close() })
	p, err := migrations.NewProvider(sqlDB)
	if err != nil {
		t.Fatal(err)
	}
	return db, p
}

// TestLatestByLastSeq: migration 16 drops poll_voters once every open
// poll's counted ballots are their principals' last rows by seq, refusing
// (naming the poll) while one is not, and its down step fills poll_voters
// again with each principal's last row.
func TestLatestByLastSeq(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, p := emptyProvider(t)
	if _, err := p.UpTo(ctx, 15); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `
INSERT INTO polls (id, title, answers, opens_at) VALUES ('lunch', 'x', 'latest', '2000-01-01');
INSERT INTO poll_choices VALUES ('lunch', 'a', 0), ('lunch', 'b', 1);
INSERT INTO poll_events (poll_id, candidate_id, principal_id, client_event_id, fingerprint, received_at, latest)
    VALUES ('lunch', 'a', 'u1', 'k1', '\x00'::bytea, now(), true), ('lunch', 'b', 'u1', 'k2', '\x00'::bytea, now(), true);
INSERT INTO poll_voters (poll_id, principal_id, seq, ballot)
    SELECT poll_id, principal_id, seq, candidate_id FROM poll_events WHERE client_event_id = 'k1';`); err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 16); err == nil || !strings.Contains(err.Error(), "poll lunch") {
		t.Fatalf("up to 16 with a counted ballot not the last by seq in an open poll: %v, want an error naming poll lunch", err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE polls SET closes_at = now() - interval '1 second' WHERE id = 'lunch'`); err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 16); err != nil {
		t.Fatalf("up to 16 once the poll closed: %v", err)
	}
	if got := tables(t, db); slices.Contains(got, "poll_voters") {
		t.Fatalf("tables after migration 16: %v, want no poll_voters", got)
	}
	if _, err := p.DownTo(ctx, 15); err != nil {
		t.Fatalf("down to 15: %v", err)
	}
	var key, ballot string
	if err := db.Pool.QueryRow(ctx, `SELECT e.client_event_id, v.ballot FROM poll_voters v JOIN poll_events e USING (seq)`).Scan(&key, &ballot); err != nil || key != "k2" || ballot != "b" {
		t.Fatalf("poll_voters after going down: %s %s (%v), want u1's last row, k2 with b", key, ballot, err)
	}
}
