package ledger

import (
	"context"
	"fmt"
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
// poll_events finds; it must be its last in the poll's log too, and a
// change must take out the ballot that is last before it there. An append
// draws its seqs at the insert, where concurrent appends overlap, but
// numbers its rows in a poll's log only under the poll's head (log_store.go),
// in the order the appends commit. So the ballots it replaces are the
// ones its principals' rows before its own by seq when it holds the heads,
// when every append before it in the log has committed and none after it
// has. It reads them just before it locks the heads (readLatest), with the
// sizes of the polls' logs, and again under the heads for a poll whose log
// grew in between (recheck): with the sizes unchanged, no append committed
// to the poll since the read. Where the Store knows who has a ballot in a
// poll (voters.go), the read skips the principals that have none, and the
// recheck reads again only those of its principals that the log got rows
// of since what the Store knew. Either read also makes sure that no append
// before it in the log recorded a row of one of its principals with a
// later seq than its own: such a row would be before its rows in the log
// and after them by seq, and the append runs again (errRaced), drawing
// seqs after it. An append that holds the head after it finds its rows
// and takes the last of them out. In one batch a principal's rows are
// inserted in batch order (insert.go), which is leaf order. A single
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
// whose principal's last ballot before it is taken out (read, checked
// under the polls' log heads). It adds poll_results' figures per choice,
// poll_pairwise's cells and poll_ballots' count, each in a fixed order,
// in one statement.
func addFigures(ctx context.Context, tx pgx.Tx, in appendInput, outcomes []Outcome, rules map[string]*pollRules, read *latestRead) error {
	bc := batchCounts{rules: rules, counts: map[string]*vote.Count{}}
	for i, e := range in.events {
		if outcomes[i].Status == StatusRecorded && rules[e.PollID] != nil && !in.latest[i] && in.ballotOK[i] {
			bc.add(e.PollID, in.ballots[i], 1)
		}
	}
	if read != nil {
		for _, i := range read.lb.latest {
			e := in.events[i]
			if in.ballotOK[i] {
				bc.add(e.PollID, in.ballots[i], 1)
			} else {
				bc.addAnswer(e.PollID, e.Answer(), 1)
			}
			if old, ok := read.replaced[pollPrincipal{e.PollID, e.PrincipalID}]; ok {
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
// first there and how many it recorded (mine), by latest's index.
type lastOfBatch struct {
	latest   []int
	firstSeq []int64
	mine     []int32
	at       map[pollPrincipal]int
}

func (lb *lastOfBatch) note(i int, e Event, seq int64) {
	pp := pollPrincipal{e.PollID, e.PrincipalID}
	if j, ok := lb.at[pp]; ok {
		lb.latest[j] = i
		lb.firstSeq[j] = min(lb.firstSeq[j], seq)
		lb.mine[j]++
		return
	}
	if lb.at == nil {
		lb.at = map[pollPrincipal]int{}
	}
	lb.at[pp] = len(lb.latest)
	lb.latest = append(lb.latest, i)
	lb.firstSeq = append(lb.firstSeq, seq)
	lb.mine = append(lb.mine, 1)
}

// where is the part of lb whose flag is set, by lb's index.
func (lb lastOfBatch) where(flags []bool) lastOfBatch {
	var out lastOfBatch
	for j, ok := range flags {
		if ok {
			out.latest = append(out.latest, lb.latest[j])
			out.firstSeq = append(out.firstSeq, lb.firstSeq[j])
			out.mine = append(out.mine, lb.mine[j])
		}
	}
	return out
}

// lastBallotsSQL reads, for each (poll, principal, seq, mine), the
// principal's row after its last mine rows, by seq: the append's own rows
// of the principal are mine rows from seq on, so that row is the last
// ballot before them, unless a concurrent append committed a row of the
// principal from seq on (raced). One backward scan of poll_events_latest
// reads it.
const lastBallotsSQL = `
SELECT n.poll_id, n.principal_id, l.answer, l.seq >= n.seq AS raced
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::int[]) AS n(poll_id, principal_id, seq, mine)
CROSS JOIN LATERAL (
    SELECT e.seq, coalesce(e.ballot, e.candidate_id) AS answer FROM poll_events e
    WHERE e.latest AND e.poll_id = n.poll_id AND e.principal_id = n.principal_id
    ORDER BY e.seq DESC OFFSET n.mine LIMIT 1) l`

// queueLastBallots queues on b the read of the ballots that lb's events
// (the last recorded of each (poll, principal)) replace: each principal's
// last ballot before the first of its rows this append recorded, which it
// hands to done. Read when every other append that recorded rows of the
// poll and comes before this one in the log has committed (recheck), a row
// of one of those with a later seq than one of the append's means that the
// append's seqs and its place in the log disagree: the read fails with
// errRaced, for the append to run again.
func queueLastBallots(b *pgx.Batch, events []Event, lb lastOfBatch, done func(map[pollPrincipal]string)) {
	n := len(lb.latest)
	polls, principals := make([]string, n), make([]string, n)
	for j, i := range lb.latest {
		polls[j], principals[j] = events[i].PollID, events[i].PrincipalID
	}
	b.Queue(lastBallotsSQL, polls, principals, lb.firstSeq, lb.mine).Query(func(rows pgx.Rows) error {
		old := map[pollPrincipal]string{}
		var (
			pp     pollPrincipal
			ballot string
			raced  bool
		)
		_, err := pgx.ForEachRow(rows, []any{&pp.poll, &pp.principal, &ballot, &raced}, func() error {
			if raced {
				return fmt.Errorf("%w: a ballot of principal %s in poll %s, its seq after this batch's, is before them in the log", errRaced, pp.principal, pp.poll)
			}
			old[pp] = ballot
			return nil
		})
		done(old)
		return err
	})
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
