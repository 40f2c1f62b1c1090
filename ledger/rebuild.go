package ledger

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// TallyRow compares one figure of a poll: the recount of the ledger and
// the projection's. Figure is FigureVotes ("", left out of the JSON) for a
// candidate's votes (the count of a single choice's ledger rows), else one
// of the Figure constants (rebuild_figures.go).
type TallyRow struct {
	PollID      string `json:"poll_id"`
	CandidateID string `json:"candidate_id"`
	Figure      string `json:"figure,omitempty"`
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

// rebuildSQL recounts the ledger, and rebuildPollSQL one poll ($1), for
// Repair. Two statements, not "$1 IS NULL OR poll_id = $1", which a
// cached generic plan checks on every row and which keeps one poll's
// recount from its indexes.
const (
	rebuildSQL = `
SELECT poll_id, coalesce(ballot, candidate_id), count(*) FROM poll_events GROUP BY 1, 2`
	rebuildPollSQL = `
SELECT poll_id, coalesce(ballot, candidate_id), count(*) FROM poll_events e WHERE ` + pollRowsOf + ` GROUP BY 1, 2`
)

// pollRowsOf is the condition on poll_events e that finds poll $1's rows
// through the two partial indexes that together hold every row, by
// (poll_id, principal_id): poll_events_poll_principal_uniq (WHERE NOT
// latest) and poll_events_latest (WHERE latest). latest is NOT NULL, so
// "e.latest OR NOT e.latest" changes no answer; without it PostgreSQL can
// use neither index and reads the whole table for one poll.
const pollRowsOf = `e.poll_id = $1 AND (e.latest OR NOT e.latest)`

// Rebuild recomputes every tally from the ledger (one poll when pollID is
// not empty) in one REPEATABLE READ snapshot and sets it beside the
// projection, and hashes each poll's rows again to check its log against
// the stored head and tiles. The recount is made by the pass that hashes
// the rows (log_pass.go), which reads every row once for both. It changes
// nothing.
func (s *Store) Rebuild(ctx context.Context, pollID string) (Report, error) {
	var rep Report
	err := s.runTx(ctx, "rebuild", pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rules, err := ballotPolls(ctx, tx, optional(pollID))
		if err != nil {
			return err
		}
		latest := latestPolls(rules)
		if s.latestInSQL {
			latest = nil
		}
		logs, counts, last, err := s.verifyLogs(ctx, tx, pollID, latest)
		if err != nil {
			return err
		}
		if rep, err = besideProjection(ctx, tx, pollID, counts, rules, last); err != nil {
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
//
// counts are the ledger's rows by (poll, canonical ballot): for a poll of
// kind single that is by candidate, and the count is its votes; the polls
// of other kinds, whose rules are rules (ballotPolls), are folded into
// their figures (rebuild_figures.go), a poll of answers latest counting
// its principals' last ballots: last's, by answer, where the pass kept
// them (else read with latestSQL).
func besideProjection(ctx context.Context, tx pgx.Tx, pollID string, counts map[tallyKey]int64, rules map[string]*pollRules, last map[string]map[string]int64) (Report, error) {
	p := optional(pollID)
	rep := Report{}
	for _, n := range counts {
		rep.LedgerEvents += n
	}
	if err := countLatest(ctx, tx, counts, rules, last); err != nil {
		return Report{}, err
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
	if _, err := pgx.ForEachRow(rows, []any{&k.poll, &k.cand, &n}, func() error {
		if rules[k.poll] == nil {
			proj[k] = n
		}
		return nil
	}); err != nil {
		return Report{}, err
	}
	for k, n := range counts {
		if rules[k.poll] == nil {
			rep.Rows = append(rep.Rows, TallyRow{PollID: k.poll, CandidateID: k.cand, Ledger: n, Projection: proj[k]})
		}
	}
	for k, n := range proj {
		if _, ok := counts[k]; !ok {
			rep.Rows = append(rep.Rows, TallyRow{PollID: k.poll, CandidateID: k.cand, Projection: n})
		}
	}
	projFigures, err := projectionFigures(ctx, tx, rules)
	if err != nil {
		return Report{}, err
	}
	figures := figureRowsOf(ledgerFigures(counts, rules), projFigures)
	rep.Rows = append(rep.Rows, figures...)
	// Ids are COLLATE "C": byte order, as Go compares strings.
	slices.SortFunc(rep.Rows, func(a, b TallyRow) int {
		return cmp.Or(strings.Compare(a.PollID, b.PollID), strings.Compare(a.CandidateID, b.CandidateID), strings.Compare(a.Figure, b.Figure))
	})
	for _, r := range rep.Rows {
		if r.Differs() {
			rep.Differing++
		}
	}
	return rep, nil
}

// recount is the ledger's count, grouped in SQL, beside the projection,
// for Repair: the report, the counts and the rules of the polls of other
// kinds than single.
func recount(ctx context.Context, tx pgx.Tx, pollID string) (Report, map[tallyKey]int64, map[string]*pollRules, error) {
	var (
		rows pgx.Rows
		err  error
	)
	if pollID == "" {
		rows, err = tx.Query(ctx, rebuildSQL)
	} else {
		rows, err = tx.Query(ctx, rebuildPollSQL, pollID)
	}
	if err != nil {
		return Report{}, nil, nil, err
	}
	counts := map[tallyKey]int64{}
	var (
		k tallyKey
		n int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&k.poll, &k.cand, &n}, func() error { counts[k] = n; return nil }); err != nil {
		return Report{}, nil, nil, err
	}
	rules, err := ballotPolls(ctx, tx, optional(pollID))
	if err != nil {
		return Report{}, nil, nil, err
	}
	rep, err := besideProjection(ctx, tx, pollID, counts, rules, nil)
	return rep, counts, rules, err
}

// optional is pollID as a parameter of "$1::text IS NULL OR poll_id = $1":
// nil for every poll.
func optional(pollID string) *string {
	if pollID == "" {
		return nil
	}
	return &pollID
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
		if _, err := tx.Exec(ctx, `LOCK TABLE poll_results, poll_pairwise, poll_ballots IN EXCLUSIVE MODE`); err != nil {
			return err
		}
		rep, counts, rules, err := recount(ctx, tx, pollID)
		if err != nil {
			return err
		}
		changed = rep.Diffs()
		if err := repairFigures(ctx, tx, counts, rules, changed); err != nil {
			return err
		}
		var polls, cands []string
		var votes []int64
		for _, r := range changed {
			if rules[r.PollID] == nil {
				polls, cands, votes = append(polls, r.PollID), append(cands, r.CandidateID), append(votes, r.Ledger)
			}
		}
		if len(polls) == 0 {
			return nil
		}
		_, err = tx.Exec(ctx, `
INSERT INTO poll_results AS r (poll_id, candidate_id, vote_count)
SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[])
ON CONFLICT (poll_id, candidate_id) DO UPDATE SET vote_count = EXCLUDED.vote_count`, polls, cands, votes)
		return err
	})
	if err != nil {
		return nil, err
	}
	return changed, nil
}
