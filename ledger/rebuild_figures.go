package ledger

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"tally/vote"
)

// This file owns the recount of the polls whose rules are not vote.Single
// (ballots of another kind than single, or answers latest): the ledger's
// rows of such a poll that count (all of them, or in a poll of answers
// latest each principal's last in the poll's log), grouped by their
// canonical ballot, folded with vote.Count (the rule the projection adds
// by, in the append), beside the projection's figures read into a count of
// the same shape; and the repair that writes the ledger's figures into the
// projection. A single choice of a final poll is recounted by candidate,
// as before kinds (rebuild.go).

// The Figure of a TallyRow for the figures beyond votes. A pairwise cell
// is "above:" and the other choice's id.
const (
	FigureVotes   = ""
	FigureYes     = "yes"
	FigureNo      = "no"
	FigureAbstain = "abstain"
	FigureScore   = "score"
	FigureBorda   = "borda"
	FigureBallots = "ballots" // CandidateID empty: the poll's ballots
	FigureAbove   = "above:"  // + b: the ballots that rank CandidateID above b
	// FigureInvalid counts the ledger's rows of a poll whose ballot its
	// rules refuse (CandidateID is the ballot): no append records one, so
	// any is a discrepancy.
	FigureInvalid = "invalid"
)

// figureKey is one figure of a poll.
type figureKey struct{ poll, cand, figure string }

// ballotPolls reads the rules of every poll whose rules are not
// vote.Single (one poll's when pollID is set), in tx.
func ballotPolls(ctx context.Context, tx pgx.Tx, pollID *string) (map[string]*pollRules, error) {
	return readRules(ctx, tx, "read the polls' ballot rules",
		`(p.ballot_kind <> 'single' OR p.answers <> 'final') AND ($1::text IS NULL OR p.id = $1)`, pollID)
}

// latestSQL reads the ballot that counts of each principal of the polls
// of answers latest in $1: its last row in the poll's log (in leaf order,
// which is not always seq order), grouped by canonical ballot.
const latestSQL = `
SELECT poll_id, answer, count(*) FROM (
    SELECT DISTINCT ON (e.poll_id, e.principal_id) e.poll_id, coalesce(e.ballot, e.candidate_id) AS answer
    FROM poll_log_leaves l
    CROSS JOIN LATERAL unnest(l.seqs) WITH ORDINALITY AS s(seq, ord)
    JOIN poll_events e ON s.seq > 0 AND e.seq = s.seq AND e.poll_id = l.poll_id
    WHERE l.poll_id = ANY($1)
    ORDER BY e.poll_id, e.principal_id, l.first_leaf + s.ord DESC
) last GROUP BY 1, 2`

// latestPolls are the polls of answers latest among rules.
func latestPolls(rules map[string]*pollRules) map[string]bool {
	out := map[string]bool{}
	for p, pr := range rules {
		if pr.rules.Answers == vote.AnswersLatest {
			out[p] = true
		}
	}
	return out
}

// countLatest replaces, in counts, the rows of each poll of answers latest
// in rules by the principals' last ballots: last's for the polls it has
// (the rebuild's pass kept them), read with latestSQL for the others.
func countLatest(ctx context.Context, tx pgx.Tx, counts map[tallyKey]int64, rules map[string]*pollRules, last map[string]map[string]int64) error {
	latest := latestPolls(rules)
	for k := range counts {
		if latest[k.poll] {
			delete(counts, k)
		}
	}
	var polls []string // to read
	for p := range latest {
		kept, ok := last[p]
		if !ok {
			polls = append(polls, p)
			continue
		}
		for answer, n := range kept {
			counts[tallyKey{p, answer}] = n
		}
	}
	if len(polls) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, latestSQL, polls)
	if err != nil {
		return interpretError("read the principals' last ballots", err)
	}
	var (
		k tallyKey
		n int64
	)
	_, err = pgx.ForEachRow(rows, []any{&k.poll, &k.cand, &n}, func() error { counts[k] = n; return nil })
	return interpretError("read the principals' last ballots", err)
}

// ledgerFigures folds counts, the ledger's rows by (poll, canonical
// ballot), of the polls in rules into their figures.
func ledgerFigures(counts map[tallyKey]int64, rules map[string]*pollRules) map[figureKey]int64 {
	byPoll := map[string]*vote.Count{}
	out := map[figureKey]int64{}
	for k, n := range counts {
		pr := rules[k.poll]
		if pr == nil {
			continue
		}
		c := byPoll[k.poll]
		if c == nil {
			c = vote.NewCount(pr.rules.Kind, pr.choices)
			byPoll[k.poll] = c
		}
		b, err := vote.ParseCanonical(pr.rules.Kind, k.cand)
		if err != nil || pr.rules.Check(pr.choices, b) != nil {
			out[figureKey{k.poll, k.cand, FigureInvalid}] += n
			continue
		}
		c.Add(b, n)
	}
	for poll, pr := range rules {
		c := byPoll[poll]
		if c == nil {
			c = vote.NewCount(pr.rules.Kind, pr.choices)
		}
		figuresOf(out, poll, c)
	}
	return out
}

// figuresOf adds c's figures to out, as TallyRows name them: every
// choice's votes and its kind's figures, the pairwise cells, the ballots.
func figuresOf(out map[figureKey]int64, poll string, c *vote.Count) {
	for i, id := range c.Choices {
		f := c.Figures[i]
		out[figureKey{poll, id, FigureVotes}] += f.Votes
		switch c.Kind {
		case vote.KindApprove:
			out[figureKey{poll, id, FigureYes}] += f.Yes
			out[figureKey{poll, id, FigureNo}] += f.No
			out[figureKey{poll, id, FigureAbstain}] += f.Abstain
		case vote.KindScore:
			out[figureKey{poll, id, FigureScore}] += f.Score
		case vote.KindRanked:
			out[figureKey{poll, id, FigureBorda}] += f.Borda
			for j, other := range c.Choices {
				if i != j {
					out[figureKey{poll, id, FigureAbove + other}] += c.Beats(i, j)
				}
			}
		}
	}
	out[figureKey{poll, "", FigureBallots}] += c.Ballots
}

// projectionFigures reads the projection's figures of the polls in rules.
func projectionFigures(ctx context.Context, tx pgx.Tx, rules map[string]*pollRules) (map[figureKey]int64, error) {
	polls := make([]string, 0, len(rules))
	for p := range rules {
		polls = append(polls, p)
	}
	counts := map[string]*vote.Count{}
	for p, pr := range rules {
		counts[p] = vote.NewCount(pr.rules.Kind, pr.choices)
	}
	out := map[figureKey]int64{}
	rows, err := tx.Query(ctx, `
SELECT poll_id, candidate_id, vote_count, yes_count, no_count, abstain_count, score_sum, borda_sum
FROM poll_results WHERE poll_id = ANY($1)`, polls)
	if err != nil {
		return nil, interpretError("read the projection's figures", err)
	}
	var (
		poll, cand string
		f          vote.Figures
	)
	_, err = pgx.ForEachRow(rows, []any{&poll, &cand, &f.Votes, &f.Yes, &f.No, &f.Abstain, &f.Score, &f.Borda}, func() error {
		c := counts[poll]
		if i := c.Index(cand); i >= 0 {
			c.Figures[i] = f
		} else if f != (vote.Figures{}) {
			out[figureKey{poll, cand, FigureVotes}] += f.Votes // a row of no choice: rebuild shows it
		}
		return nil
	})
	if err != nil {
		return nil, interpretError("read the projection's figures", err)
	}
	rows, err = tx.Query(ctx, `SELECT poll_id, winner, loser, ballots FROM poll_pairwise WHERE poll_id = ANY($1)`, polls)
	if err != nil {
		return nil, interpretError("read the projection's pairwise cells", err)
	}
	var (
		winner, loser string
		n             int64
	)
	_, err = pgx.ForEachRow(rows, []any{&poll, &winner, &loser, &n}, func() error {
		c := counts[poll]
		i, j := c.Index(winner), c.Index(loser)
		if c.Pairwise == nil || i < 0 || j < 0 {
			out[figureKey{poll, winner, FigureAbove + loser}] += n
			return nil
		}
		c.Pairwise[i*len(c.Choices)+j] = n
		return nil
	})
	if err != nil {
		return nil, interpretError("read the projection's pairwise cells", err)
	}
	rows, err = tx.Query(ctx, `SELECT poll_id, ballots FROM poll_ballots WHERE poll_id = ANY($1)`, polls)
	if err != nil {
		return nil, interpretError("read the projection's ballots", err)
	}
	_, err = pgx.ForEachRow(rows, []any{&poll, &n}, func() error { counts[poll].Ballots = n; return nil })
	if err != nil {
		return nil, interpretError("read the projection's ballots", err)
	}
	for p, c := range counts {
		figuresOf(out, p, c)
	}
	return out, nil
}

// figureRowsOf are the TallyRows of ledger beside projection: every
// choice's votes, and any other figure either side holds a value of.
func figureRowsOf(ledger, projection map[figureKey]int64) []TallyRow {
	var rows []TallyRow
	for k, n := range ledger {
		p := projection[k]
		if k.figure != FigureVotes && n == 0 && p == 0 {
			continue
		}
		rows = append(rows, TallyRow{PollID: k.poll, CandidateID: k.cand, Figure: k.figure, Ledger: n, Projection: p})
	}
	for k, p := range projection {
		if _, ok := ledger[k]; !ok && (p != 0 || k.figure == FigureVotes) {
			rows = append(rows, TallyRow{PollID: k.poll, CandidateID: k.cand, Figure: k.figure, Projection: p})
		}
	}
	return rows
}

// repairFigures writes the ledger's figures of the polls in rules into the
// projection, whole, for the polls whose rows in diffs differ.
func repairFigures(ctx context.Context, tx pgx.Tx, counts map[tallyKey]int64, rules map[string]*pollRules, diffs []TallyRow) error {
	todo := map[string]bool{}
	for _, d := range diffs {
		if rules[d.PollID] != nil {
			todo[d.PollID] = true
		}
	}
	if len(todo) == 0 {
		return nil
	}
	var f figureRows
	var polls []string
	for poll := range todo {
		pr := rules[poll]
		c := vote.NewCount(pr.rules.Kind, pr.choices)
		for k, n := range counts {
			if k.poll != poll {
				continue
			}
			if b, err := vote.ParseCanonical(pr.rules.Kind, k.cand); err == nil && pr.rules.Check(pr.choices, b) == nil {
				c.Add(b, n)
			}
		}
		f.addAll(poll, c)
		polls = append(polls, poll)
	}
	if _, err := tx.Exec(ctx, `
DELETE FROM poll_pairwise WHERE poll_id = ANY($1);
`, polls); err != nil {
		return fmt.Errorf("repair the pairwise cells: %w", err)
	}
	_, err := tx.Exec(ctx, setFiguresSQL, f.args()...)
	return err
}

// setFiguresSQL is addFiguresSQL setting the figures rather than adding
// to them: Repair's write of a recount.
const setFiguresSQL = `
WITH results AS (
    INSERT INTO poll_results AS r (poll_id, candidate_id, vote_count, yes_count, no_count, abstain_count, score_sum, borda_sum)
    SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[])
    ON CONFLICT (poll_id, candidate_id) DO UPDATE SET
        vote_count = EXCLUDED.vote_count, yes_count = EXCLUDED.yes_count, no_count = EXCLUDED.no_count,
        abstain_count = EXCLUDED.abstain_count, score_sum = EXCLUDED.score_sum, borda_sum = EXCLUDED.borda_sum
), pairwise AS (
    INSERT INTO poll_pairwise (poll_id, winner, loser, ballots)
    SELECT * FROM unnest($9::text[], $10::text[], $11::text[], $12::bigint[])
)
INSERT INTO poll_ballots AS b (poll_id, ballots)
SELECT * FROM unnest($13::text[], $14::bigint[])
ON CONFLICT (poll_id) DO UPDATE SET ballots = EXCLUDED.ballots`
