package ledger

// This file holds the append's read of the ballots that its rows of polls
// of answers latest replace, and its check of that read under the polls'
// log heads (see ballots.go for the rule of which ballot counts, and
// voters.go for what the Store knows of who has a ballot already).

import (
	"context"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/tlog"
)

// latestRead is what an append read, before it locked its polls' log
// heads, of the ballots its rows of polls of answers latest replace
// (readLatest): the ballots, and what each such poll's log was taken to
// be: the Store's voterBase where it has one, or else the size of the
// log as the read found it committed.
type latestRead struct {
	lb       lastOfBatch
	replaced map[pollPrincipal]string
	bases    map[string]voterBase
	sizes    map[string]int64
	// After the heads were checked (recheck): the span each poll of bases
	// whose log was proven moves the book to, once the append commits.
	advances []voterAdvance
}

// voterAdvance is a span an append numbered in a poll whose leaves before
// it are all proven, for voterBook.advance after the commit.
type voterAdvance struct {
	poll  string
	epoch int
	to    int64
	root  tlog.Hash
}

// headSizesSQL reads the sizes of polls' logs.
const headSizesSQL = `SELECT poll_id, size FROM poll_log_heads WHERE poll_id = ANY($1::text[])`

// readLatest reads, before the append locks its polls' heads, the ballots
// its rows of polls of answers latest replace (lastBallots): for a poll
// whose voters the book knows (voters.go), only those of principals that
// may have one; for another poll, all of them, after the size of its log
// in the same round trip. It returns nil when the append recorded no row
// of such a poll. The read counts only if no append added to those logs
// between the read and the heads' lock, or the rows it added are of other
// principals: recheck reads again where that is not shown.
func readLatest(ctx context.Context, tx pgx.Tx, book *voterBook, in appendInput, outcomes []Outcome, rules map[string]*pollRules) (*latestRead, error) {
	r := &latestRead{sizes: map[string]int64{}, replaced: map[pollPrincipal]string{}}
	seen := map[string]bool{}
	var polls []string
	for i, e := range in.events {
		if outcomes[i].Status == StatusRecorded && rules[e.PollID] != nil && in.latest[i] {
			if !seen[e.PollID] {
				seen[e.PollID] = true
				polls = append(polls, e.PollID)
			}
			r.lb.note(i, e, outcomes[i].Seq)
		}
	}
	if len(r.lb.latest) == 0 {
		return nil, nil
	}
	var err error
	if r.bases, err = basesOf(ctx, tx, book, polls); err != nil {
		return nil, err
	}
	var sized []string
	for _, p := range polls {
		if _, ok := r.bases[p]; !ok {
			r.sizes[p] = -1
			sized = append(sized, p)
		}
	}
	probe := r.lb.where(r.mayHave(book, in.events))
	if len(sized) == 0 && len(probe.latest) == 0 {
		return r, nil
	}
	var b pgx.Batch
	if len(sized) > 0 {
		b.Queue(headSizesSQL, sized).Query(func(rows pgx.Rows) error {
			var (
				poll string
				size int64
			)
			_, err := pgx.ForEachRow(rows, []any{&poll, &size}, func() error { r.sizes[poll] = size; return nil })
			return err
		})
	}
	if len(probe.latest) > 0 {
		queueLastBallots(&b, in.events, probe, func(old map[pollPrincipal]string) { r.replaced = old })
	}
	if err := tx.SendBatch(ctx, &b).Close(); err != nil {
		return nil, interpretError("append batch: read the ballots replaced", err)
	}
	return r, nil
}

// basesOf is the book's base of each of polls it knows, loading those it
// is to load.
func basesOf(ctx context.Context, tx pgx.Tx, book *voterBook, polls []string) (map[string]voterBase, error) {
	bases, load := book.plan(polls)
	if len(load) == 0 {
		return bases, nil
	}
	loaded, err := book.load(ctx, tx, load)
	for p, base := range loaded {
		bases[p] = base
	}
	return bases, err
}

// mayHave says, by r.lb's index, which principals may have a ballot
// before the append's: all of those of a poll without a base.
func (r *latestRead) mayHave(book *voterBook, events []Event) []bool {
	var pps []pollPrincipal
	var at []int
	probe := make([]bool, len(r.lb.latest))
	for j, i := range r.lb.latest {
		e := events[i]
		if _, ok := r.bases[e.PollID]; ok {
			pps, at = append(pps, pollPrincipal{e.PollID, e.PrincipalID}), append(at, j)
		} else {
			probe[j] = true
		}
	}
	for k, may := range book.mayHave(pps) {
		probe[at[k]] = may
	}
	return probe
}

// recheck reads again, now that the append holds its polls' heads
// (moves: each head as found under the lock and as the append leaves
// it), the ballots replaced where the read may have missed an append
// that committed in between: in a poll of bases, of the principals the
// log got rows of since the base (all of them where the book cannot tell
// which: voterBook.prove); in another, of every principal, when the log's
// size differs from the one the read saw (-1 for a log still to build).
// Where the sizes agree, no append committed to the poll since the read,
// which saw every append before this one in the log. It also notes the
// append's own span of each poll in the book.
func (r *latestRead) recheck(ctx context.Context, tx pgx.Tx, book *voterBook, events []Event, moves map[string]headMove) error {
	if r == nil {
		return nil
	}
	stale := r.staleUnder(book, events, moves)
	r.noteSpans(book, events, moves)
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

// staleUnder is the part of r.lb to read again under the heads (recheck),
// and it notes in r.advances the polls whose logs the book proved.
func (r *latestRead) staleUnder(book *voterBook, events []Event, moves map[string]headMove) lastOfBatch {
	type proof struct {
		between map[string]bool
		ok      bool
	}
	proofs := map[string]proof{}
	stale := make([]bool, len(r.lb.latest))
	for j, i := range r.lb.latest {
		e := events[i]
		at := moves[e.PollID]
		base, ok := r.bases[e.PollID]
		if !ok {
			stale[j] = at.from < 0 || at.from != r.sizes[e.PollID]
			continue
		}
		pf, done := proofs[e.PollID]
		if !done {
			pf.between, pf.ok = book.prove(e.PollID, base, at.from, at.fromRoot)
			proofs[e.PollID] = pf
			if pf.ok && at.from >= 0 {
				r.advances = append(r.advances, voterAdvance{poll: e.PollID, epoch: base.epoch, to: at.to, root: at.toRoot})
			}
		}
		stale[j] = !pf.ok || pf.between[e.PrincipalID]
	}
	return r.lb.where(stale)
}

// noteSpans notes in the book, for each poll of r.lb whose log is built,
// the leaves the append added and the principals of its rows there.
func (r *latestRead) noteSpans(book *voterBook, events []Event, moves map[string]headMove) {
	principals := map[string][]string{}
	var polls []string
	for _, i := range r.lb.latest {
		e := events[i]
		if principals[e.PollID] == nil {
			polls = append(polls, e.PollID)
		}
		principals[e.PollID] = append(principals[e.PollID], e.PrincipalID)
	}
	for _, p := range polls {
		if m := moves[p]; m.from >= 0 {
			book.note(p, voterSpan{from: m.from, to: m.to, fromRoot: m.fromRoot, toRoot: m.toRoot, principals: principals[p]})
		}
	}
}

// committed tells the book that the append committed: the polls whose
// logs it proved now start after its span.
func (r *latestRead) committed(book *voterBook) {
	if r == nil {
		return
	}
	for _, a := range r.advances {
		book.advance(a.poll, a.epoch, a.to, a.root)
	}
}
