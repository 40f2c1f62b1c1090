package ledger

import (
	"context"
	"strings"
	"testing"

	"tally/internal/testenv"
)

// TestOnePollReadsUseTheIndexes: each statement that reads one poll's
// ledger rows can find them through the poll's indexes (pollRowsOf). With
// sequential scans priced out, PostgreSQL plans each of them through
// poll_events_poll_principal_uniq, which it cannot for the same statement
// with a plain "poll_id = $1": that reads the whole ledger for one poll
// (a sequential scan, or the primary key's index whole).
func TestOnePollReadsUseTheIndexes(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	byPoll := func(sql string) bool {
		t.Helper()
		rows, err := conn.Query(ctx, "EXPLAIN "+strings.ReplaceAll(sql, "$1", "'p'"))
		if err != nil {
			t.Fatalf("explain %s: %v", sql, err)
		}
		defer rows.Close()
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		return strings.Contains(strings.Join(plan, "\n"), "poll_events_poll_principal_uniq")
	}
	for name, sql := range map[string]string{
		"the pass's rows": passPollRowsSQL, "the recount": rebuildPollSQL,
		"the row count": pollRowCountSQL, "the rows in no leaf": unnumberedSQL, "the export": exportPollSQL,
	} {
		if !byPoll(sql) {
			t.Errorf("%s of one poll reads the whole ledger: %s", name, sql)
		}
		if plain := strings.ReplaceAll(sql, pollRowsOf, "e.poll_id = $1"); byPoll(plain) {
			t.Errorf("%s with a plain poll_id = $1 finds the poll's rows by its index too: the check above proves nothing", name)
		}
	}
}
