package ledger_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"tally/ledger"
)

// tableOrders are orders a ledger's rows may lie in the table apart from
// seq order, as the pass reads them: runs of two writers' rows, each run
// in seq order (concurrent appends filling pages of their own); runs in
// reverse; and no order at all.
var tableOrders = map[string]string{
	"two writers' runs": `(seq - 1) / 80, seq % 2 DESC, seq`,
	"reversed runs":     `(seq - 1) / 100, seq DESC`,
	"shuffled":          `md5(seq::text)`,
}

// rowsInTableOrder writes n ledger rows of polls p (seqs not a multiple
// of 5) and q (the others) in the table in order, as rows from before the
// log, and builds their logs, which number the rows in seq order.
func rowsInTableOrder(t *testing.T, b bundle, order string, n int) {
	t.Helper()
	b.poll(t, "p", "a", "b")
	b.poll(t, "q", "a", "b")
	for _, stmt := range []string{
		`INSERT INTO poll_events (seq, poll_id, candidate_id, principal_id, client_event_id, fingerprint, received_at)
		 OVERRIDING SYSTEM VALUE
		 SELECT seq, p, c, 'u' || seq, 'k', sha256(convert_to(p, 'UTF8') || '\x00'::bytea || convert_to(c, 'UTF8')),
		        timestamptz '2026-01-01' + seq * interval '1 millisecond'
		 FROM (SELECT seq, CASE WHEN seq % 5 = 0 THEN 'q' ELSE 'p' END AS p, CASE WHEN seq % 3 = 0 THEN 'b' ELSE 'a' END AS c
		       FROM generate_series(1, ` + strconv.Itoa(n) + `) seq) r
		 ORDER BY ` + order,
		`SELECT setval(pg_get_serial_sequence('poll_events', 'seq'), ` + strconv.Itoa(n) + `)`,
		`UPDATE poll_log_heads h SET size = h.size + c.n, root = NULL, partial = ''
		 FROM (SELECT poll_id, count(*) AS n FROM poll_events GROUP BY poll_id) c WHERE h.poll_id = c.poll_id`,
	} {
		if _, err := b.db.Pool.Exec(b.ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	if _, err := b.store.BuildLogs(b.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Repair(b.ctx, ""); err != nil {
		t.Fatal(err)
	}
}

// The pass reads the rows in the table's order: whatever that order, an
// honest ledger's logs are all hashed in the one pass and verify, and a
// changed, deleted or inserted row or leaves put out of order are named
// at their leaf.
func TestRebuildOfRowsOutOfSeqOrder(t *testing.T) {
	t.Parallel()
	// Runs long enough that the queue of p's rows held takes back the
	// room of the rows gone while it still holds others.
	t.Run("long runs, honest", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rowsInTableOrder(t, b, `(seq - 1) / 8000, seq % 2 DESC, seq`, 16000)
		assertOnePass(t, b, "p", "q")
		rep, err := b.store.Rebuild(b.ctx, "")
		if err != nil || rep.Differing != 0 || rep.LogProblems != 0 || rep.LedgerEvents != 16000 {
			t.Fatalf("rebuild: %v, %d differing, %d log problems, %d events: %+v", err, rep.Differing, rep.LogProblems, rep.LedgerEvents, rep.Logs)
		}
	})
	for name, order := range tableOrders {
		t.Run(name+", honest", func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			rowsInTableOrder(t, b, order, 1200)
			assertOnePass(t, b, "p", "q")
			rep, err := b.store.Rebuild(b.ctx, "")
			if err != nil || rep.Differing != 0 || rep.LogProblems != 0 || rep.LedgerEvents != 1200 {
				t.Fatalf("rebuild: %v, %d differing, %d log problems, %d events: %+v", err, rep.Differing, rep.LogProblems, rep.LedgerEvents, rep.Logs)
			}
		})
		for _, tc := range []struct {
			name     string
			sql      string
			wantLeaf int64
			want     string
		}{
			{"changed candidate", `UPDATE poll_events SET candidate_id = CASE candidate_id WHEN 'a' THEN 'b' ELSE 'a' END WHERE seq = ` + leafSeq("p", 300), 300, "does not hash"},
			{"changed principal of the last row", `UPDATE poll_events SET principal_id = 'mallory' WHERE seq = ` + leafSeq("p", 960), 960, "does not hash"},
			{"deleted row", `DELETE FROM poll_events WHERE seq = ` + leafSeq("p", 77), 77, "missing"},
			{"inserted row", `INSERT INTO poll_events (poll_id, candidate_id, principal_id, client_event_id, fingerprint, received_at)
				VALUES ('p', 'a', 'mallory', 'k', '\x00', now())`, 961, "in no leaf"},
			{"swapped rows", `UPDATE poll_log_leaves SET seqs = seqs[1:5] || seqs[7] || seqs[6] || seqs[8:] WHERE poll_id = 'p' AND first_leaf = 1`, 6, "does not hash"},
			// Its row comes before the rows of the leaves it now follows:
			// held first, it must not hold them up.
			{"moved row", `UPDATE poll_log_leaves SET seqs = seqs[1:5] || seqs[7:40] || seqs[6] || seqs[41:] WHERE poll_id = 'p' AND first_leaf = 1`, 6, "does not hash"},
		} {
			t.Run(name+", "+tc.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				rowsInTableOrder(t, b, order, 1200)
				tamper(t, b, tc.sql)
				// p is still hashed in the one pass, its rows held as
				// long as they must be, unless a row of it is gone.
				if strings.Contains(tc.name, "deleted") {
					assertOnePass(t, b, "q")
				} else {
					assertOnePass(t, b, "p", "q")
				}
				if _, err := b.store.Repair(b.ctx, ""); err != nil {
					t.Fatal(err)
				}
				assertOnlyPFound(t, b, tc.wantLeaf, tc.want)
			})
		}
	}
}

// assertOnePass fails t unless the one pass hashes exactly polls.
func assertOnePass(t *testing.T, b bundle, polls ...string) {
	t.Helper()
	got, err := ledger.OnePassPolls(b.ctx, b.store)
	if err != nil || !slices.Equal(got, polls) {
		t.Fatalf("the one pass hashed %v (%v), want %v", got, err, polls)
	}
}
