package ledger

import (
	"context"
	"hash/fnv"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"

	"tally/vote"
)

// This file owns the append's part for the polls whose rules are not
// vote.Single (vote/ballot.go): each ballot of another kind than single
// checked against its poll's rules, which the Store reads once per poll (a
// poll's kind, parameters, answers mode and choices never change once it
// is created), and the figures of the ballots the append recorded added to
// the projection in the same transaction (addFigures). In a poll of
// answers latest, a principal's new ballot replaces its last one, and the
// old ballot's figures are taken out as the new one's go in.
//
// The ballot that counts of a principal in a poll of answers latest is
// its last row of the poll by seq (migration 00016), which an index of
// poll_events finds. So that the last by seq is the last in the poll's
// log, and a change never misses a ballot another append is recording,
// an append first takes a transaction lock per (poll, principal) of its
// events of such polls, in key order (lockPrincipals), before it draws
// any seq: two appends of one principal's ballots take turns, the second
// drawing its seqs, numbering its leaves and reading the ballot it
// replaces after the first committed. In one batch a principal's rows
// are inserted in batch order (insert.go), which is leaf order. A single
// choice of a final poll is counted by the insert's own statement
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

// rulesOf returns the rules of the polls of events, by poll id, reading
// those it does not hold in tx; a poll that does not exist is absent.
func (s *Store) rulesOf(ctx context.Context, tx pgx.Tx, events []Event) (map[string]*pollRules, error) {
	out := map[string]*pollRules{}
	var missing []string
	s.rules.mu.Lock()
	for _, e := range events {
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
	read, err := readRules(ctx, tx, "append batch: read the polls' ballot rules", `p.id = ANY($1)`, missing)
	if err != nil {
		return nil, err
	}
	for id, pr := range read {
		out[id] = pr
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

// readRules reads the rules and choices of the polls p that where
// selects, by id.
func readRules(ctx context.Context, tx pgx.Tx, what, where string, args ...any) (map[string]*pollRules, error) {
	rows, err := tx.Query(ctx, `
SELECT p.id, `+rulesColsP+`, coalesce((SELECT array_agg(c.candidate_id ORDER BY c.position) FROM poll_choices c WHERE c.poll_id = p.id), '{}')
FROM polls p WHERE `+where, args...)
	if err != nil {
		return nil, interpretError(what, err)
	}
	out := map[string]*pollRules{}
	var (
		id      string
		rr      rulesRow
		choices []string
	)
	_, err = pgx.ForEachRow(rows, append(append([]any{&id}, rr.targets()...), &choices), func() error {
		out[id] = &pollRules{rules: rr.rules(), choices: choices}
		return nil
	})
	return out, interpretError(what, err)
}

// readBallots reads, for each event, the ballot it carries if its poll's
// rules take it: ok[i] says so, ballots[i] is the ballot, read once for
// the check and the count (addFigures). An event of a single choice is
// not ok: the statements check its choice themselves.
func readBallots(events []Event, rules map[string]*pollRules) (ok []bool, ballots []vote.Ballot) {
	ok, ballots = make([]bool, len(events)), make([]vote.Ballot, len(events))
	for i, e := range events {
		pr := rules[e.PollID]
		if e.Ballot == "" || pr == nil || pr.rules.Kind == vote.KindSingle {
			continue
		}
		b, err := vote.ParseCanonical(pr.rules.Kind, e.Ballot)
		if err == nil && pr.rules.Check(pr.choices, b) == nil {
			ok[i], ballots[i] = true, b
		}
	}
	return ok, ballots
}

// latestOf reports, for each event, whether its poll's answers are
// latest.
func latestOf(events []Event, rules map[string]*pollRules) []bool {
	latest := make([]bool, len(events))
	for i, e := range events {
		if pr := rules[e.PollID]; pr != nil {
			latest[i] = pr.rules.Answers == vote.AnswersLatest
		}
	}
	return latest
}

// addFigures adds to the projection the figures of the ballots this
// append recorded that the insert's statement did not count: ballots of
// other kinds than single, and every ballot of a poll of answers latest,
// whose principal's last ballot before it is taken out (lastBallots). It
// adds poll_results' figures per choice, poll_pairwise's cells and
// poll_ballots' count, each in a fixed order, in one statement.
func addFigures(ctx context.Context, tx pgx.Tx, in appendInput, outcomes []Outcome, rules map[string]*pollRules) error {
	bc := batchCounts{rules: rules, counts: map[string]*vote.Count{}}
	var lb lastOfBatch
	for i, e := range in.events {
		switch {
		case outcomes[i].Status != StatusRecorded || rules[e.PollID] == nil:
		case in.latest[i]:
			lb.note(i, e, outcomes[i].Seq)
		case in.ballotOK[i]:
			bc.add(e.PollID, in.ballots[i], 1)
		}
	}
	if len(lb.latest) > 0 {
		replaced, err := lastBallots(ctx, tx, in.events, lb.latest, lb.firstSeq)
		if err != nil {
			return err
		}
		for _, i := range lb.latest {
			e := in.events[i]
			if in.ballotOK[i] {
				bc.add(e.PollID, in.ballots[i], 1)
			} else {
				bc.addAnswer(e.PollID, e.Answer(), 1)
			}
			if old, ok := replaced[pollPrincipal{e.PollID, e.PrincipalID}]; ok {
				bc.addAnswer(e.PollID, old, -1)
			}
		}
	}
	if len(bc.counts) == 0 {
		return nil
	}
	var f figureRows
	for _, p := range bc.polls {
		f.add(p, bc.counts[p])
	}
	_, err := tx.Exec(ctx, addFiguresSQL, f.args()...)
	return interpretError("append batch: count the ballots", err)
}

// batchCounts sums a batch's ballots, one vote.Count per poll, its polls
// in the order they first appear.
type batchCounts struct {
	rules  map[string]*pollRules
	counts map[string]*vote.Count
	polls  []string
}

func (bc *batchCounts) add(poll string, b vote.Ballot, sign int64) {
	c := bc.counts[poll]
	if c == nil {
		pr := bc.rules[poll]
		c = vote.NewCount(pr.rules.Kind, pr.choices)
		bc.counts[poll] = c
		bc.polls = append(bc.polls, poll)
	}
	c.Add(b, sign)
}

// addAnswer adds an answer in its canonical form; one that is not a ballot
// of the poll was never recorded, and counts nothing.
func (bc *batchCounts) addAnswer(poll, answer string, sign int64) {
	if b, err := vote.ParseCanonical(bc.rules[poll].rules.Kind, answer); err == nil {
		bc.add(poll, b, sign)
	}
}

// lastOfBatch collects the recorded events of polls of answers latest:
// the last of each (poll, principal) in the batch, and the seq of its
// first there, by latest's index.
type lastOfBatch struct {
	latest   []int
	firstSeq []int64
	at       map[pollPrincipal]int
}

func (lb *lastOfBatch) note(i int, e Event, seq int64) {
	pp := pollPrincipal{e.PollID, e.PrincipalID}
	if j, ok := lb.at[pp]; ok {
		lb.latest[j] = i
		lb.firstSeq[j] = min(lb.firstSeq[j], seq)
		return
	}
	if lb.at == nil {
		lb.at = map[pollPrincipal]int{}
	}
	lb.at[pp] = len(lb.latest)
	lb.latest = append(lb.latest, i)
	lb.firstSeq = append(lb.firstSeq, seq)
}

// lockPrincipalsSQL takes the transaction locks of lockPrincipals, in the
// order of its arrays.
const lockPrincipalsSQL = `
SELECT count(pg_advisory_xact_lock(k.a, k.b)) FROM unnest($1::int[], $2::int[]) AS k(a, b)`

// lockPrincipals takes, before the append inserts anything, a transaction
// lock per (poll, principal) of the events of polls of answers latest, in
// the order of their keys, so that two appends that share some wait for
// each other whole rather than deadlock. A lock's key is a 64-bit hash of
// the pair, in the two-key space of PostgreSQL's advisory locks: two pairs
// that share a key only make their appends take turns. Each lock is an
// entry of PostgreSQL's shared lock table until the commit, so a batch
// holds as many as its principals of such polls (docs/operations.md).
func lockPrincipals(ctx context.Context, tx pgx.Tx, events []Event, latest []bool) error {
	var keys []uint64
	for i, e := range events {
		if latest[i] {
			h := fnv.New64a()
			h.Write([]byte(e.PollID))
			h.Write([]byte{0})
			h.Write([]byte(e.PrincipalID))
			keys = append(keys, h.Sum64())
		}
	}
	if len(keys) == 0 {
		return nil
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	a, b := make([]int32, len(keys)), make([]int32, len(keys))
	for i, k := range keys {
		a[i], b[i] = int32(k>>32), int32(k)
	}
	_, err := tx.Exec(ctx, lockPrincipalsSQL, a, b)
	return interpretError("append batch: lock the principals of polls of answers latest", err)
}

// lastBallotsSQL reads, for each (poll, principal, seq), the principal's
// last ballot in the poll before that seq, if any (poll_events_latest).
const lastBallotsSQL = `
SELECT n.poll_id, n.principal_id, l.answer
FROM unnest($1::text[], $2::text[], $3::bigint[]) AS n(poll_id, principal_id, seq)
CROSS JOIN LATERAL (
    SELECT coalesce(e.ballot, e.candidate_id) AS answer FROM poll_events e
    WHERE e.latest AND e.poll_id = n.poll_id AND e.principal_id = n.principal_id AND e.seq < n.seq
    ORDER BY e.seq DESC LIMIT 1) l`

// lastBallots returns the ballots that events[idx] (one per (poll,
// principal), each recorded, their principals locked by lockPrincipals)
// replace: each principal's last ballot before firstSeq, the seq of its
// first row this append recorded. Under the lock every other row of the
// principal in the poll has committed, so it is the last before this
// append's in the log.
func lastBallots(ctx context.Context, tx pgx.Tx, events []Event, idx []int, firstSeq []int64) (map[pollPrincipal]string, error) {
	const what = "append batch: read the ballots replaced"
	n := len(idx)
	polls, principals := make([]string, n), make([]string, n)
	for j, i := range idx {
		polls[j], principals[j] = events[i].PollID, events[i].PrincipalID
	}
	rows, err := tx.Query(ctx, lastBallotsSQL, polls, principals, firstSeq)
	if err != nil {
		return nil, interpretError(what, err)
	}
	old := map[pollPrincipal]string{}
	var (
		pp     pollPrincipal
		ballot string
	)
	if _, err := pgx.ForEachRow(rows, []any{&pp.poll, &pp.principal, &ballot}, func() error { old[pp] = ballot; return nil }); err != nil {
		return nil, interpretError(what, err)
	}
	return old, nil
}

// addFiguresSQL adds figure deltas to the projection, in sorted order so
// that concurrent appends lock rows in the same order. A delta may be
// negative (a replaced ballot taken out), which an INSERT's row would not
// pass the tables' CHECKs with even on its way to ON CONFLICT: so the rows
// are updated, and CreatePoll made every one of them (createFiguresSQL).
const addFiguresSQL = `
WITH results AS (
    UPDATE poll_results r SET
        vote_count = r.vote_count + d.votes, yes_count = r.yes_count + d.yes, no_count = r.no_count + d.no,
        abstain_count = r.abstain_count + d.abstain, score_sum = r.score_sum + d.score, borda_sum = r.borda_sum + d.borda
    FROM (SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[])
          AS d(poll_id, candidate_id, votes, yes, no, abstain, score, borda) ORDER BY 1, 2) d
    WHERE r.poll_id = d.poll_id AND r.candidate_id = d.candidate_id
), pairwise AS (
    UPDATE poll_pairwise w SET ballots = w.ballots + d.ballots
    FROM (SELECT * FROM unnest($9::text[], $10::text[], $11::text[], $12::bigint[]) AS d(poll_id, winner, loser, ballots) ORDER BY 1, 2, 3) d
    WHERE w.poll_id = d.poll_id AND w.winner = d.winner AND w.loser = d.loser
)
UPDATE poll_ballots b SET ballots = b.ballots + d.ballots
FROM (SELECT * FROM unnest($13::text[], $14::bigint[]) AS d(poll_id, ballots) ORDER BY 1) d
WHERE b.poll_id = d.poll_id`

// createFiguresSQL makes the projection's rows of a poll's figures beyond
// poll_results' (createZeroResultsSQL): its count of ballots and, for
// ranked, every cell of its pairwise matrix, at zero, so that appends
// only update them.
const createFiguresSQL = `
WITH ballots AS (
    INSERT INTO poll_ballots (poll_id, ballots) VALUES ($1, 0) ON CONFLICT DO NOTHING
)
INSERT INTO poll_pairwise (poll_id, winner, loser, ballots)
SELECT $1, a, b, 0 FROM unnest($2::text[]) AS a CROSS JOIN unnest($2::text[]) AS b
WHERE $3 AND a <> b
ON CONFLICT DO NOTHING`

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

// addAll adds every figure of c, zeros too: a poll's figures whole, as
// Repair sets them.
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
		if v != 0 || all && k/n != k%n {
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
