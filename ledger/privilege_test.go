package ledger_test

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"tally/internal/testenv"
	"tally/ledger"
)

// asDaemon logs in to b's database as a new LOGIN role granted
// tally_daemon, as docs/operations.md has the operator do, and returns a
// bundle whose store runs as it. The role is dropped when t ends.
func asDaemon(t *testing.T, b bundle) bundle {
	t.Helper()
	role := testenv.RandomName("tally_daemon_test_")
	if _, err := b.db.Pool.Exec(b.ctx, `CREATE ROLE `+pgx.Identifier{role}.Sanitize()+` LOGIN IN ROLE tally_daemon`); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(b.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	pool, err := pgxpool.New(b.ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Close()
		if _, err := b.db.Pool.Exec(b.ctx, `DROP ROLE `+pgx.Identifier{role}.Sanitize()); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	store, err := ledger.New(pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return bundle{db: testenv.DB{Name: b.db.Name, URL: u.String(), Pool: pool}, store: store, ctx: b.ctx}
}

// appendOnlyDigest is, read by the owner, every row of the append-only
// tables and whether their triggers are on: what tampering would change.
func appendOnlyDigest(t *testing.T, b bundle) string {
	t.Helper()
	var d string
	err := b.db.Pool.QueryRow(b.ctx, `
SELECT concat_ws(' ',
    (SELECT count(*) || ':' || md5(coalesce(string_agg(e::text, ',' ORDER BY e.seq), '')) FROM poll_events e),
    (SELECT count(*) || ':' || md5(coalesce(string_agg(x::text, ',' ORDER BY x.poll_id, x.level, x.idx), '')) FROM poll_log_tiles x),
    (SELECT count(*) || ':' || md5(coalesce(string_agg(c::text, ',' ORDER BY c.poll_id, c.size), '')) FROM poll_log_checkpoints c),
    (SELECT count(*) || ':' || md5(coalesce(string_agg(l::text, ',' ORDER BY l.id), '')) FROM poll_log_leaves l),
    (SELECT string_agg(tgname || '=' || tgenabled::text, ',' ORDER BY tgname) FROM pg_trigger WHERE NOT tgisinternal))`).Scan(&d)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The daemons' role appends to the ledger and its log, signs checkpoints
// and rebuilds, but may not change or remove what is written, nor turn
// off the triggers that guard it: only the owner could.
func TestDaemonRoleCannotRewriteThePast(t *testing.T) {
	t.Parallel()
	owner := setup(t)
	owner.poll(t, "p", "a", "b")
	d := asDaemon(t, owner)

	batch := make([]ledger.Event, 300) // more than a tile of leaves
	for j := range batch {
		batch[j] = ev(fmt.Sprintf("u%d", j), "k", "p", []string{"a", "b"}[j%2])
	}
	batch = append(batch, ev("u0", "k2", "p", "b"), ev("x", "k", "nopoll", "a")) // rejections
	outs, err := d.store.Append(d.ctx, batch)
	if err != nil {
		t.Fatalf("append as the daemons' role: %v", err)
	}
	statuses := map[ledger.Status]int{}
	for _, o := range outs {
		statuses[o.Status]++
	}
	if statuses[ledger.StatusRecorded] != 300 || statuses[ledger.StatusRejected] != 2 {
		t.Fatalf("append as the daemons' role: %v, want 300 recorded and 2 rejected", statuses)
	}
	head, err := d.store.Head(d.ctx, "p")
	if err != nil || head.Size != 301 {
		t.Fatalf("head after the append: %+v (%v), want size 301: the poll's definition and 300 votes", head, err)
	}
	signHead(t, d, head)
	if rep := checkInvariants(t, d); len(rep.Logs) != 1 || rep.LedgerEvents != 300 {
		t.Fatalf("rebuild as the daemons' role: %+v", rep)
	}

	before := appendOnlyDigest(t, owner)
	for _, stmt := range []string{
		`UPDATE poll_events SET candidate_id = 'b' WHERE candidate_id = 'a'`,
		`DELETE FROM poll_events`,
		`TRUNCATE poll_events`,
		`UPDATE poll_log_tiles SET hashes = hashes`,
		`DELETE FROM poll_log_tiles`,
		`TRUNCATE poll_log_tiles`,
		`UPDATE poll_log_leaves SET seqs = seqs`,
		`DELETE FROM poll_log_leaves`,
		`TRUNCATE poll_log_leaves`,
		`UPDATE poll_log_checkpoints SET checkpoint = ''`,
		`DELETE FROM poll_log_checkpoints`,
		`TRUNCATE poll_log_checkpoints`,
		`ALTER TABLE poll_events DISABLE TRIGGER ALL`,
		`ALTER TABLE poll_events DISABLE TRIGGER poll_events_no_update_delete`,
		`ALTER TABLE poll_log_tiles DISABLE TRIGGER ALL`,
		`SET session_replication_role = replica`,
		`INSERT INTO polls (id, title) VALUES ('mine', 'x')`,
	} {
		_, err := d.db.Pool.Exec(d.ctx, stmt)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("%s as the daemons' role: %v, want insufficient privilege (42501)", stmt, err)
			continue
		}
		// The role's own privileges refuse it, not the append-only trigger
		// (whose refusal has the same code) that the owner could turn off.
		if strings.Contains(pgErr.Message, "append-only") {
			t.Errorf("%s as the daemons' role: refused by the trigger, not by privilege: %v", stmt, err)
		}
	}
	if after := appendOnlyDigest(t, owner); after != before {
		t.Errorf("the append-only tables changed under the daemons' role:\n before %s\n after  %s", before, after)
	}
	checkInvariants(t, d)
}

// TestRole: the owner (a superuser here) is privileged, and may change
// the ledger; a login granted tally_daemon is neither.
func TestRole(t *testing.T) {
	t.Parallel()
	owner := setup(t)
	r, err := owner.store.Role(owner.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Superuser || !r.MayChangeLedger || !r.Privileged() {
		t.Errorf("the owner's role %+v: want a superuser that may change the ledger", r)
	}
	d := asDaemon(t, owner)
	r, err = d.store.Role(d.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.Superuser || r.MayChangeLedger || r.Privileged() || !strings.HasPrefix(r.Name, "tally_daemon_test_") {
		t.Errorf("the daemon login's role %+v: want %s, neither a superuser nor one that may change the ledger", r, r.Name)
	}
}
