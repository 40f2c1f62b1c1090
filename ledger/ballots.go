package ledger

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"

	"tally/vote"
)

// This file owns the append's part for ballots of other kinds than single
// (vote/ballot.go): each such event checked against its poll's rules,
// which the Store reads once per poll (a poll's kind, parameters and
// choices never change once it is created), and the figures of the ballots
// the append recorded added to the projection in the same transaction
// (addFigures). A single choice is counted by the insert's own statement
// (insert.go), as before kinds.

// pollRules are what a poll's ballots are checked and counted against.
type pollRules struct {
	rules   vote.Rules
	choices []string
}

// rulesCache holds the pollRules of each poll an append has met.
type rulesCache struct {
	mu    sync.Mutex
	polls map[string]*pollRules
}

// rulesOf returns the rules of the polls of events that carry a ballot,
// by poll id, reading those it does not hold in tx; a poll that does not
// exist is absent.
func (s *Store) rulesOf(ctx context.Context, tx pgx.Tx, events []Event) (map[string]*pollRules, error) {
	out := map[string]*pollRules{}
	var missing []string
	s.rules.mu.Lock()
	for _, e := range events {
		if e.Ballot == "" {
			continue
		}
		if _, ok := out[e.PollID]; ok {
			continue
		}
		if pr, ok := s.rules.polls[e.PollID]; ok {
			out[e.PollID] = pr
		} else {
			out[e.PollID] = nil
			missing = append(missing, e.PollID)
		}
	}
	s.rules.mu.Unlock()
	if len(missing) == 0 {
		return out, nil
	}
	rows, err := tx.Query(ctx, `
SELECT p.id, `+rulesColsP+`, coalesce((SELECT array_agg(c.candidate_id ORDER BY c.position) FROM poll_choices c WHERE c.poll_id = p.id), '{}')
FROM polls p WHERE p.id = ANY($1)`, missing)
	if err != nil {
		return nil, interpretError("append batch: read the polls' ballot rules", err)
	}
	var (
		id      string
		rr      rulesRow
		choices []string
	)
	_, err = pgx.ForEachRow(rows, append(append([]any{&id}, rr.targets()...), &choices), func() error {
		out[id] = &pollRules{rules: rr.rules(), choices: choices}
		return nil
	})
	if err != nil {
		return nil, interpretError("append batch: read the polls' ballot rules", err)
	}
	s.rules.mu.Lock()
	if s.rules.polls == nil {
		s.rules.polls = map[string]*pollRules{}
	}
	for id, pr := range out {
		if pr != nil {
			s.rules.polls[id] = pr
		} else {
			delete(out, id)
		}
	}
	s.rules.mu.Unlock()
	return out, nil
}

// ballotsValid reports, for each event, whether it carries a ballot that
// its poll's rules take. An event of a single choice is false: the
// statements check its choice themselves.
func ballotsValid(events []Event, rules map[string]*pollRules) []bool {
	ok := make([]bool, len(events))
	for i, e := range events {
		pr := rules[e.PollID]
		if e.Ballot == "" || pr == nil || pr.rules.Kind == vote.KindSingle {
			continue
		}
		b, err := vote.ParseCanonical(pr.rules.Kind, e.Ballot)
		ok[i] = err == nil && pr.rules.Check(pr.choices, b) == nil
	}
	return ok
}

// addFigures adds the figures of the ballots of events[idx] (recorded by
// this append; ballotsValid took them) to the projection: poll_results'
// figures per choice, poll_pairwise's cells, poll_ballots' count, each in
// a fixed order, in one statement.
func addFigures(ctx context.Context, tx pgx.Tx, events []Event, idx []int, rules map[string]*pollRules) error {
	counts := map[string]*vote.Count{}
	var polls []string
	for _, i := range idx {
		e := events[i]
		pr := rules[e.PollID]
		if e.Ballot == "" || pr == nil {
			continue
		}
		b, err := vote.ParseCanonical(pr.rules.Kind, e.Ballot)
		if err != nil {
			continue // ballotsValid refused it: not recorded
		}
		c := counts[e.PollID]
		if c == nil {
			c = vote.NewCount(pr.rules.Kind, pr.choices)
			counts[e.PollID] = c
			polls = append(polls, e.PollID)
		}
		c.Add(b, 1)
	}
	if len(counts) == 0 {
		return nil
	}
	var f figureRows
	for _, p := range polls {
		f.add(p, counts[p])
	}
	_, err := tx.Exec(ctx, addFiguresSQL, f.args()...)
	return interpretError("append batch: count the ballots", err)
}

// addFiguresSQL adds figure deltas to the projection; every delta may be
// negative (a replaced ballot taken out), and the sorted arrays keep the
// order in which concurrent appends lock rows the same.
const addFiguresSQL = `
WITH results AS (
    INSERT INTO poll_results AS r (poll_id, candidate_id, vote_count, yes_count, no_count, abstain_count, score_sum, borda_sum)
    SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[])
    ORDER BY 1, 2
    ON CONFLICT (poll_id, candidate_id) DO UPDATE SET
        vote_count = r.vote_count + EXCLUDED.vote_count, yes_count = r.yes_count + EXCLUDED.yes_count,
        no_count = r.no_count + EXCLUDED.no_count, abstain_count = r.abstain_count + EXCLUDED.abstain_count,
        score_sum = r.score_sum + EXCLUDED.score_sum, borda_sum = r.borda_sum + EXCLUDED.borda_sum
), pairwise AS (
    INSERT INTO poll_pairwise AS w (poll_id, winner, loser, ballots)
    SELECT * FROM unnest($9::text[], $10::text[], $11::text[], $12::bigint[])
    ORDER BY 1, 2, 3
    ON CONFLICT (poll_id, winner, loser) DO UPDATE SET ballots = w.ballots + EXCLUDED.ballots
)
INSERT INTO poll_ballots AS b (poll_id, ballots)
SELECT * FROM unnest($13::text[], $14::bigint[])
ORDER BY 1
ON CONFLICT (poll_id) DO UPDATE SET ballots = b.ballots + EXCLUDED.ballots`

// figureRows are counts as the arrays of addFiguresSQL (and of Repair):
// the choices with a figure not zero, the pairwise cells not zero, each
// poll's ballots.
type figureRows struct {
	polls, cands                          []string
	votes, yes, no, abstain, score, borda []int64
	pwPolls, winners, losers              []string
	pwBallots                             []int64
	bPolls                                []string
	ballots                               []int64
}

// add adds c's figures that are not zero, as deltas.
func (f *figureRows) add(poll string, c *vote.Count) { f.rows(poll, c, false) }

// addAll adds every figure of c, zeros too but for the pairwise cells: a
// poll's figures whole, as Repair sets them.
func (f *figureRows) addAll(poll string, c *vote.Count) { f.rows(poll, c, true) }

func (f *figureRows) rows(poll string, c *vote.Count, all bool) {
	for i, fig := range c.Figures {
		if fig == (vote.Figures{}) && !all {
			continue
		}
		f.polls, f.cands = append(f.polls, poll), append(f.cands, c.Choices[i])
		f.votes, f.yes, f.no = append(f.votes, fig.Votes), append(f.yes, fig.Yes), append(f.no, fig.No)
		f.abstain, f.score, f.borda = append(f.abstain, fig.Abstain), append(f.score, fig.Score), append(f.borda, fig.Borda)
	}
	n := len(c.Choices)
	for k, v := range c.Pairwise {
		if v != 0 {
			f.pwPolls = append(f.pwPolls, poll)
			f.winners, f.losers = append(f.winners, c.Choices[k/n]), append(f.losers, c.Choices[k%n])
			f.pwBallots = append(f.pwBallots, v)
		}
	}
	if c.Ballots != 0 || all {
		f.bPolls, f.ballots = append(f.bPolls, poll), append(f.ballots, c.Ballots)
	}
}

func (f *figureRows) args() []any {
	return []any{f.polls, f.cands, f.votes, f.yes, f.no, f.abstain, f.score, f.borda,
		f.pwPolls, f.winners, f.losers, f.pwBallots, f.bPolls, f.ballots}
}
