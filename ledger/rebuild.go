package ledger

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// TallyRow compares one (poll, candidate) tally: the count of ledger rows
// and the projection's vote_count.
type TallyRow struct {
	PollID      string `json:"poll_id"`
	CandidateID string `json:"candidate_id"`
	Ledger      int64  `json:"ledger"`
	Projection  int64  `json:"projection"`
}

// Differs reports whether the projection disagrees with the ledger.
func (r TallyRow) Differs() bool { return r.Ledger != r.Projection }

// Report is the outcome of a rebuild: every (poll, candidate) that the
// ledger or the projection knows, in (poll, candidate) order.
type Report struct {
	Rows         []TallyRow `json:"rows"`
	LedgerEvents int64      `json:"ledger_events"`
	Differing    int        `json:"differing"`
	// Logs is every poll's log checked against its rows (Rebuild only).
	Logs []LogCheck `json:"logs"`
	// LogProblems counts the logs that did not verify.
	LogProblems int `json:"log_problems"`
}

// Diffs returns the rows that differ.
func (r Report) Diffs() []TallyRow {
	var out []TallyRow
	for _, row := range r.Rows {
		if row.Differs() {
			out = append(out, row)
		}
	}
	return out
}

// rebuildSQL recounts the ledger and sets it beside the projection. $1 NULL
// means every poll.
const rebuildSQL = `
SELECT poll_id, candidate_id, coalesce(l.n, 0), coalesce(r.vote_count, 0)
FROM (SELECT poll_id, candidate_id, count(*) AS n FROM poll_events
      WHERE $1::text IS NULL OR poll_id = $1 GROUP BY poll_id, candidate_id) l
FULL JOIN (SELECT poll_id, candidate_id, vote_count FROM poll_results
      WHERE $1::text IS NULL OR poll_id = $1) r USING (poll_id, candidate_id)
ORDER BY poll_id, candidate_id`

// Rebuild recomputes every tally from the ledger (one poll when pollID is
// not empty) in one REPEATABLE READ snapshot and sets it beside the
// projection, and hashes each poll's rows again to check its log against
// the stored head and tiles. The recount is made by the pass that hashes
// the rows (log_pass.go), which reads every row once for both. It changes
// nothing.
func (s *Store) Rebuild(ctx context.Context, pollID string) (Report, error) {
	var rep Report
	err := s.runTx(ctx, "rebuild", pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		logs, counts, err := s.verifyLogs(ctx, tx, pollID)
		if err != nil {
			return err
		}
		if rep, err = besideProjection(ctx, tx, pollID, counts); err != nil {
			return err
		}
		rep.Logs = logs
		for _, c := range rep.Logs {
			if !c.OK() {
				rep.LogProblems++
			}
		}
		return nil
	})
	return rep, err
}

// besideProjection sets the ledger's counts beside the projection's rows
// (one poll's when pollID is set), as rebuildSQL's full join does.
func besideProjection(ctx context.Context, tx pgx.Tx, pollID string, counts map[tallyKey]int64) (Report, error) {
	var p *string
	if pollID != "" {
		p = &pollID
	}
	rows, err := tx.Query(ctx, `SELECT poll_id, candidate_id, vote_count FROM poll_results WHERE $1::text IS NULL OR poll_id = $1`, p)
	if err != nil {
		return Report{}, err
	}
	proj := map[tallyKey]int64{}
	var (
		k tallyKey
		n int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&k.poll, &k.cand, &n}, func() error { proj[k] = n; return nil }); err != nil {
		return Report{}, err
	}
	var rep Report
	for k, n := range counts {
		rep.Rows = append(rep.Rows, TallyRow{PollID: k.poll, CandidateID: k.cand, Ledger: n, Projection: proj[k]})
		rep.LedgerEvents += n
	}
	for k, n := range proj {
		if _, ok := counts[k]; !ok {
			rep.Rows = append(rep.Rows, TallyRow{PollID: k.poll, CandidateID: k.cand, Projection: n})
		}
	}
	// Ids are COLLATE "C": byte order, as Go compares strings.
	slices.SortFunc(rep.Rows, func(a, b TallyRow) int {
		return cmp.Or(strings.Compare(a.PollID, b.PollID), strings.Compare(a.CandidateID, b.CandidateID))
	})
	for _, r := range rep.Rows {
		if r.Differs() {
			rep.Differing++
		}
	}
	return rep, nil
}

// recount is the ledger's count beside the projection, in SQL, for
// Repair.
func recount(ctx context.Context, tx pgx.Tx, pollID string) (Report, error) {
	var p *string
	if pollID != "" {
		p = &pollID
	}
	rows, err := tx.Query(ctx, rebuildSQL, p)
	if err != nil {
		return Report{}, err
	}
	rs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[TallyRow])
	if err != nil {
		return Report{}, err
	}
	rep := Report{Rows: rs}
	for _, r := range rs {
		rep.LedgerEvents += r.Ledger
		if r.Differs() {
			rep.Differing++
		}
	}
	return rep, nil
}

// Repair rewrites the projection from the ledger (one poll when pollID is
// not empty) and returns the rows it changed, with their values before.
//
// It is safe while appends go on: it first takes an EXCLUSIVE lock on
// poll_results, which waits for every append in flight to commit and holds
// new ones back until Repair commits (an append takes its locks on both
// tables before it inserts anything). The recount then sees every
// committed ledger row and no half-applied batch, so no append is lost or
// counted twice. Appends wait for as long as the recount takes.
func (s *Store) Repair(ctx context.Context, pollID string) ([]TallyRow, error) {
	var changed []TallyRow
	err := s.runTx(ctx, "repair projection", pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE poll_results IN EXCLUSIVE MODE`); err != nil {
			return err
		}
		rep, err := recount(ctx, tx, pollID)
		if err != nil {
			return err
		}
		changed = rep.Diffs()
		if len(changed) == 0 {
			return nil
		}
		polls, cands, counts := make([]string, len(changed)), make([]string, len(changed)), make([]int64, len(changed))
		for i, r := range changed {
			polls[i], cands[i], counts[i] = r.PollID, r.CandidateID, r.Ledger
		}
		_, err = tx.Exec(ctx, `
INSERT INTO poll_results AS r (poll_id, candidate_id, vote_count)
SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[])
ON CONFLICT (poll_id, candidate_id) DO UPDATE SET vote_count = EXCLUDED.vote_count`, polls, cands, counts)
		return err
	})
	if err != nil {
		return nil, err
	}
	return changed, nil
}
