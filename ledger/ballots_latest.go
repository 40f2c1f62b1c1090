package ledger

// This file holds the append's read of the ballots that its rows of polls
// of answers latest replace, and its check of that read under the polls'
// log heads (see ballots.go for the rule of which ballot counts).

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// latestRead is what an append read, before it locked its polls' log
// heads, of the ballots its rows of polls of answers latest replace
// (readLatest): the ballots, and the size of each such poll's log as the
// read found it committed.
type latestRead struct {
	lb       lastOfBatch
	replaced map[pollPrincipal]string
	sizes    map[string]int64
}

// headSizesSQL reads the sizes of polls' logs.
const headSizesSQL = `SELECT poll_id, size FROM poll_log_heads WHERE poll_id = ANY($1::text[])`

// readLatest reads, before the append locks its polls' heads, the sizes
// of the logs of its polls of answers latest and then, in the same round
// trip, the ballots its rows there replace (lastBallots). It returns nil
// when the append recorded no row of such a poll. The read counts only if
// no append added to those logs between the two reads and the heads' lock:
// recheck reads again the ballots of the polls whose logs grew.
func readLatest(ctx context.Context, tx pgx.Tx, in appendInput, outcomes []Outcome, rules map[string]*pollRules) (*latestRead, error) {
	r := &latestRead{sizes: map[string]int64{}}
	var polls []string
	for i, e := range in.events {
		if outcomes[i].Status == StatusRecorded && rules[e.PollID] != nil && in.latest[i] {
			if _, ok := r.sizes[e.PollID]; !ok {
				r.sizes[e.PollID] = -1
				polls = append(polls, e.PollID)
			}
			r.lb.note(i, e, outcomes[i].Seq)
		}
	}
	if len(r.lb.latest) == 0 {
		return nil, nil
	}
	var b pgx.Batch
	b.Queue(headSizesSQL, polls).Query(func(rows pgx.Rows) error {
		var (
			poll string
			size int64
		)
		_, err := pgx.ForEachRow(rows, []any{&poll, &size}, func() error { r.sizes[poll] = size; return nil })
		return err
	})
	queueLastBallots(&b, in.events, r.lb, func(old map[pollPrincipal]string) { r.replaced = old })
	if err := tx.SendBatch(ctx, &b).Close(); err != nil {
		return nil, interpretError("append batch: read the ballots replaced", err)
	}
	return r, nil
}

// recheck reads again, now that the append holds its polls' heads, the
// ballots replaced in the polls whose logs' sizes at the lock (at, -1 for
// a log still to build) differ from those readLatest saw: an append that
// committed in between may have recorded the ballot replaced, or a later
// one. Where the sizes agree, no append committed to the poll since the
// read, which saw every append before this one in the log.
func (r *latestRead) recheck(ctx context.Context, tx pgx.Tx, events []Event, at map[string]int64) error {
	if r == nil {
		return nil
	}
	var stale lastOfBatch
	for j, i := range r.lb.latest {
		if p := events[i].PollID; at[p] < 0 || at[p] != r.sizes[p] {
			stale.latest = append(stale.latest, i)
			stale.firstSeq = append(stale.firstSeq, r.lb.firstSeq[j])
			stale.mine = append(stale.mine, r.lb.mine[j])
		}
	}
	if len(stale.latest) == 0 {
		return nil
	}
	var b pgx.Batch
	var again map[pollPrincipal]string
	queueLastBallots(&b, events, stale, func(old map[pollPrincipal]string) { again = old })
	if err := tx.SendBatch(ctx, &b).Close(); err != nil {
		return interpretError("append batch: read the ballots replaced again", err)
	}
	for _, i := range stale.latest {
		delete(r.replaced, pollPrincipal{events[i].PollID, events[i].PrincipalID})
	}
	for pp, old := range again {
		r.replaced[pp] = old
	}
	return nil
}
