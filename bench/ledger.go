package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"tally/audit"
	"tally/ledger"
)

// importFile times `tally import` of an n-event file (every event a first
// response of its own principal) into a fresh ledger, and returns
// events/s.
func (e *env) importFile(ctx context.Context, bin, what string, n int) (float64, string, error) {
	url, pool, err := e.database(ctx, what)
	if err != nil {
		return 0, "", err
	}
	defer pool.Close()
	const polls = 10
	if err := createPolls(ctx, pool, polls); err != nil {
		return 0, "", err
	}
	file := filepath.Join(e.tmp, what+".jsonl")
	f, err := os.Create(file)
	if err != nil {
		return 0, "", err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	now := time.Now().UTC().Format(audit.TimeFormat)
	for i := range n {
		ev := syntheticEvent(i, polls, time.Time{})
		fmt.Fprintf(w, `{"event_id":%q,"poll_id":%q,"candidate_id":%q,"principal_id":%q,"received_at":%q}`+"\n",
			ev.ClientEventID, ev.PollID, ev.CandidateID, ev.PrincipalID, now)
	}
	if err := w.Flush(); err != nil {
		return 0, "", err
	}
	if err := f.Close(); err != nil {
		return 0, "", err
	}
	defer os.Remove(file)
	command := fmt.Sprintf("tally import --format json FILE  (shipped settings: batch 1000, 2 workers; FILE: %d JSON lines, each a first response)", n)
	cmd := exec.CommandContext(ctx, bin, "import", "--format", "json", "--database-url", url, file)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, logFile
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, command, fmt.Errorf("tally import: %w\n%s", err, out.String())
	}
	elapsed := time.Since(start)
	var rep struct {
		Outcomes map[string]int `json:"outcomes"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		return 0, command, fmt.Errorf("tally import output: %w\n%s", err, out.String())
	}
	if rep.Outcomes["recorded"] != n {
		return 0, command, fmt.Errorf("tally import recorded %d of %d events: %v", rep.Outcomes["recorded"], n, rep.Outcomes)
	}
	return float64(n) / elapsed.Seconds(), command, nil
}

// plainCountSQL is the recount a user would write by hand; plainBallotsSQL
// is the same of ballots of another kind, a count of each distinct
// canonical ballot (what the rebuild's recount folds into figures).
const (
	plainCountSQL   = `SELECT poll_id, candidate_id, count(*) FROM poll_events GROUP BY poll_id, candidate_id`
	plainBallotsSQL = `SELECT poll_id, ballot, count(*) FROM poll_events GROUP BY poll_id, ballot`
	// plainLatestSQL counts each principal's last ballot by seq, as a
	// poll of answers latest counts (the plain aggregate for it).
	plainLatestSQL = `SELECT poll_id, candidate_id, count(*) FROM (SELECT DISTINCT ON (poll_id, principal_id) poll_id, candidate_id FROM poll_events ORDER BY poll_id, principal_id, seq DESC) last GROUP BY poll_id, candidate_id`
)

// rebuildResult compares ledger.Store.Rebuild with a plain GROUP BY.
type rebuildResult struct {
	events           int
	build            time.Duration // the COPY of the ledger
	rebuild, plain   time.Duration // medians
	rebuilds, plains []time.Duration
}

// rebuildVsCount builds a ledger of n events of l with COPY (two writers)
// and its projection, then times Store.Rebuild and plain, a GROUP BY,
// rounds times each, alternating, after one warm-up run of each.
func (e *env) rebuildVsCount(ctx context.Context, what string, l load, plain string, n, rounds int) (rebuildResult, error) {
	res := rebuildResult{events: n}
	_, pool, err := e.database(ctx, what)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	const polls = 10
	if err := prepareLedger(ctx, pool, l, polls); err != nil {
		return res, err
	}
	start := time.Now()
	if err := fillLedger(ctx, pool, l, n, polls); err != nil {
		return res, err
	}
	res.build = time.Since(start)
	store, err := ledger.New(pool, ledger.Config{})
	if err != nil {
		return res, err
	}
	for i := 0; i <= rounds; i++ {
		r, err := timeRebuild(ctx, store, n)
		if err != nil {
			return res, err
		}
		p, err := timePlainCount(ctx, pool, plain, l.principals(n))
		if err != nil {
			return res, err
		}
		if i > 0 { // the first round warms the cache
			res.rebuilds = append(res.rebuilds, r)
			res.plains = append(res.plains, p)
		}
	}
	res.rebuild, res.plain = median(res.rebuilds), median(res.plains)
	return res, nil
}

// prepareLedger creates the polls of a fresh ledger and drops its unique
// constraints: a recount reads the whole table and uses neither unique
// index, and without them the table loads several times faster.
func prepareLedger(ctx context.Context, pool *pgxpool.Pool, l load, polls int) error {
	if err := createLoadPolls(ctx, pool, polls, l); err != nil {
		return err
	}
	_, err := pool.Exec(ctx, `ALTER TABLE poll_events DROP CONSTRAINT poll_events_principal_key_uniq;
		DROP INDEX poll_events_poll_principal_uniq`)
	return err
}

// fillLedger writes n events of l over the polls by COPY from two
// writers, the polls' logs (as after migrating a ledger from before the
// log: heads sized, then built by BuildLogs), and the projection from a
// recount (a plain GROUP BY for single choices, Store.Repair for other
// kinds). Each
// head already counts the leaves CreatePoll logged (the poll's definition,
// leaf 0); the copied events follow them.
func fillLedger(ctx context.Context, pool *pgxpool.Pool, l load, n, polls int) error {
	conns := func(ctx context.Context) (*pgx.Conn, func(), error) {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return nil, nil, err
		}
		return c.Conn(), c.Release, nil
	}
	if _, err := copyRows(ctx, conns, l, n, 250_000, 2, polls); err != nil {
		return err
	}
	store, err := ledger.New(pool, ledger.Config{})
	if err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `UPDATE poll_log_heads h SET size = h.size + c.n, root = NULL, partial = ''
		FROM (SELECT poll_id, count(*) AS n FROM poll_events GROUP BY poll_id) c WHERE h.poll_id = c.poll_id`); err != nil {
		return err
	}
	if _, err := store.BuildLogs(ctx); err != nil {
		return err
	}
	// After the logs: a poll of answers latest counts each principal's
	// last ballot in its log.
	if l.rules.IsDefault() {
		if _, err := pool.Exec(ctx, `INSERT INTO poll_results AS r (poll_id, candidate_id, vote_count) `+plainCountSQL+`
		ON CONFLICT (poll_id, candidate_id) DO UPDATE SET vote_count = EXCLUDED.vote_count`); err != nil {
			return err
		}
	} else if _, err := store.Repair(ctx, ""); err != nil {
		return err
	}
	_, err = pool.Exec(ctx, `VACUUM (ANALYZE) poll_events`)
	return err
}

// timeRebuild times one Store.Rebuild of the whole ledger, which must
// find n events and no differing tally.
func timeRebuild(ctx context.Context, store *ledger.Store, n int) (time.Duration, error) {
	t := time.Now()
	rep, err := store.Rebuild(ctx, "")
	if err != nil {
		return 0, err
	}
	if rep.Differing != 0 || rep.LedgerEvents != int64(n) || rep.LogProblems != 0 {
		return 0, fmt.Errorf("rebuild: %d events, %d differing tallies, %d logs not verified; want %d, 0 and 0",
			rep.LedgerEvents, rep.Differing, rep.LogProblems, n)
	}
	return time.Since(t), nil
}

// timePlainCount times one plain GROUP BY (plainCountSQL's shape), whose
// counts must add up to n (the ballots that count).
func timePlainCount(ctx context.Context, pool *pgxpool.Pool, plain string, n int) (time.Duration, error) {
	t := time.Now()
	rows, err := pool.Query(ctx, plain)
	if err != nil {
		return 0, err
	}
	var sum int64
	var p, c string
	var k int64
	if _, err := pgx.ForEachRow(rows, []any{&p, &c, &k}, func() error { sum += k; return nil }); err != nil {
		return 0, err
	}
	if sum != int64(n) {
		return 0, fmt.Errorf("plain count: %d ballots, want %d", sum, n)
	}
	return time.Since(t), nil
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
