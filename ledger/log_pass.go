package ledger

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"tally/audit"
)

// This file owns the rebuild's one pass over the ledger: every row read
// once, in seq order, and handed to its poll's hasher, which hashes the
// poll's rows in leaf order on a goroutine of its own. Per poll it yields
// what hashRows does (log_build.go), without a lookup of each leaf's row
// by its seq and without sorting the rows in leaf order, which is most of
// what hashRows costs PostgreSQL.
//
// A poll's leaves are mostly in seq order (numberRowsSQL numbers by seq;
// appends commit nearly in the order they drew their seqs), so a row that
// comes before its turn waits in a small table until its leaf is next. A
// poll whose leaves do not line up with its rows (a leaf whose row is
// gone or another poll's, a seq in two leaves, leaves not numbered one
// after another) stalls or is seen to be malformed; it is left out of
// the pass's result, and verifyLogs checks it the per-poll way, which
// names its first wrong leaf.

// passPending bounds the rows a poll may hold waiting for their leaf. A
// poll past it is left to the per-poll check.
const passPending = 1 << 18

// passBatch is how many rows go to a poll's hasher at once.
const passBatch = 1 << 12

// passRow is a ledger row as the pass reads it. Its strings are slices
// of one, a row's one allocation (passRows).
type passRow struct {
	seq      int64
	cand     string // the ballot, canonical (Event.Answer)
	pr       string
	key      string
	received time.Time
	fp       string
	def      *audit.Definition // a definition's leaf (seq < 0), not a row
}

// hashed is a poll's rows hashed in leaf order, as hashRows gives them,
// and the count of the poll's rows.
type hashed struct {
	state logState
	full  []fullTile
	n     int64 // leaves hashed
	badFP int64 // the first leaf whose fingerprint is wrong, -1: none
	// badDef is the first leaf that breaks the definitions (-1: none),
	// and defProblem says how.
	badDef     int64
	defProblem string
	defs       int64 // definition leaves
	rows       int64 // the ledger's rows of the poll
}

// passPoll is one poll in the pass.
type passPoll struct {
	id      string
	seqs    []int64 // its leaves' rows, in leaf order
	next    int     // the leaf whose row comes next
	pending map[int64]passRow
	defs    map[int64]*audit.Definition // every poll's, by id
	counts  map[string]int64            // its rows, by candidate
	rows    int64
	failed  bool // left to the per-poll check

	batch []passRow
	work  chan []passRow
	done  chan struct{}
	out   hashed
	err   error // the hasher's
}

// tallyKey is a (poll, candidate) the pass counts the rows of.
type tallyKey struct{ poll, cand string }

// hashInOnePass hashes the logs of heads (one poll's when pollID is set)
// in one pass over the ledger, in tx's snapshot. It returns the polls it
// could hash (the others are for the per-poll check) and the count of
// the ledger's rows of each (poll, candidate), the recount, which the
// pass makes as it reads every row anyway.
func hashInOnePass(ctx context.Context, tx pgx.Tx, heads []logHeadRow, pollID string) (map[string]*hashed, map[tallyKey]int64, error) {
	var p *string
	if pollID != "" {
		p = &pollID
	}
	polls, err := passLeaves(ctx, tx, heads, p)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		for _, pp := range polls {
			pp.stop()
		}
	}()
	counts := map[tallyKey]int64{}
	err = passRows(ctx, tx, p, func(poll []byte, r passRow) {
		pp := polls[string(poll)]
		if pp == nil {
			counts[tallyKey{string(poll), r.cand}]++ // a poll without a head
			return
		}
		pp.counts[r.cand]++
		if !pp.failed { // else left to the per-poll check
			pp.take(r)
		}
	})
	if err != nil {
		return nil, nil, interpretError("read the ledger for its logs", err)
	}
	for id, pp := range polls {
		for cand, n := range pp.counts {
			counts[tallyKey{id, cand}] += n
		}
	}
	out := map[string]*hashed{}
	for id, pp := range polls {
		if pp.failed || pp.next < len(pp.seqs) {
			continue
		}
		pp.flush()
		pp.stop()
		if pp.err != nil {
			continue
		}
		h := pp.out
		h.rows = pp.rows
		out[id] = &h
	}
	return out, counts, nil
}

// passLeaves reads the leaves of the polls of heads, in leaf order. A poll
// whose leaf rows are not numbered one after another from 0 is marked
// failed: the per-poll check names what is wrong.
func passLeaves(ctx context.Context, tx pgx.Tx, heads []logHeadRow, pollID *string) (map[string]*passPoll, error) {
	polls := make(map[string]*passPoll, len(heads))
	for _, h := range heads {
		if h.root == nil {
			continue // still to build: the per-poll check says so
		}
		polls[h.poll] = &passPoll{id: h.poll, pending: map[int64]passRow{}, counts: map[string]int64{}, out: hashed{state: emptyLog(), badFP: -1}}
	}
	rows, err := tx.Query(ctx, `
SELECT poll_id, first_leaf, seqs FROM poll_log_leaves
WHERE $1::text IS NULL OR poll_id = $1 ORDER BY poll_id, first_leaf`, pollID)
	if err != nil {
		return nil, interpretError("read the logs' leaves", err)
	}
	var (
		poll  string
		first int64
		seqs  []int64
	)
	_, err = pgx.ForEachRow(rows, []any{&poll, &first, &seqs}, func() error {
		pp := polls[poll]
		if pp == nil {
			return nil
		}
		if first != int64(len(pp.seqs)) {
			pp.failed = true
		}
		pp.seqs = append(pp.seqs, seqs...)
		return nil
	})
	if err != nil {
		return nil, interpretError("read the logs' leaves", err)
	}
	defs, err := passDefinitions(ctx, tx, pollID)
	if err != nil {
		return nil, err
	}
	for _, pp := range polls {
		pp.defs = defs
		pp.catchUp()
	}
	return polls, nil
}

// passDefinitions reads the definitions of the polls (one's when pollID is
// set), by id.
func passDefinitions(ctx context.Context, tx pgx.Tx, pollID *string) (map[int64]*audit.Definition, error) {
	rows, err := tx.Query(ctx, `
SELECT d.id, `+definitionCols+` FROM poll_definitions d
WHERE $1::text IS NULL OR d.poll_id = $1`, pollID)
	if err != nil {
		return nil, interpretError("read the polls' definitions", err)
	}
	out := map[int64]*audit.Definition{}
	var (
		id  int64
		def definitionRow
	)
	_, err = pgx.ForEachRow(rows, append([]any{&id}, def.targets()...), func() error {
		d := def.definition()
		out[id] = &d
		return nil
	})
	return out, interpretError("read the polls' definitions", err)
}

// take is the poll's next row in seq order: hashed when its leaf is next,
// else held until it is.
func (pp *passPoll) take(r passRow) {
	pp.rows++
	if pp.next >= len(pp.seqs) || pp.seqs[pp.next] != r.seq {
		if len(pp.pending) >= passPending {
			pp.fail()
			return
		}
		pp.pending[r.seq] = r
		return
	}
	pp.emit(r)
	pp.catchUp()
}

// catchUp emits the leaves that are next and at hand: definitions, and
// rows held until their turn.
func (pp *passPoll) catchUp() {
	for pp.next < len(pp.seqs) && !pp.failed {
		seq := pp.seqs[pp.next]
		if seq < 0 {
			d := pp.defs[-seq]
			if d == nil || d.PollID != pp.id {
				pp.fail() // the per-poll check names the leaf
				return
			}
			pp.emit(passRow{seq: seq, def: d})
			continue
		}
		held, ok := pp.pending[seq]
		if !ok {
			return
		}
		delete(pp.pending, seq)
		pp.emit(held)
	}
}

// emit hands the row of the next leaf to the poll's hasher.
func (pp *passPoll) emit(r passRow) {
	pp.next++
	pp.batch = append(pp.batch, r)
	if len(pp.batch) == passBatch {
		pp.flush()
	}
}

// flush sends the rows emitted so far to the hasher, starting it on the
// first.
func (pp *passPoll) flush() {
	if len(pp.batch) == 0 {
		return
	}
	if pp.work == nil {
		pp.work, pp.done = make(chan []passRow, 2), make(chan struct{})
		go pp.hash()
	}
	pp.work <- pp.batch
	pp.batch = make([]passRow, 0, passBatch)
}

// fail leaves the poll to the per-poll check.
func (pp *passPoll) fail() {
	pp.failed, pp.pending, pp.batch = true, nil, nil
	pp.stop()
}

// stop ends the hasher, if it runs, and waits for it.
func (pp *passPoll) stop() {
	if pp.work != nil {
		close(pp.work)
		<-pp.done
		pp.work = nil
	}
}

// hash hashes the batches of rows, in leaf order, with a leafHasher, as
// hashRows does, until the work channel is closed.
func (pp *passPoll) hash() {
	defer close(pp.done)
	lh := newLeafHasher(pp.id)
	for batch := range pp.work {
		for _, r := range batch {
			if pp.err != nil {
				break // drain
			}
			if r.def != nil {
				pp.err = lh.addDefinition(*r.def)
			} else {
				pp.err = lh.add(EventOf(r.pr, r.key, pp.id, r.cand, r.received), r.fp)
			}
		}
	}
	if pp.err == nil {
		pp.err = lh.flush()
	}
	pp.out = lh.h
}

// passRowsSQL reads the ledger's rows (one poll's when $1 is set) in seq
// order, as the pass wants them.
const passRowsSQL = `
SELECT seq, poll_id, coalesce(ballot, candidate_id), principal_id, client_event_id, received_at, fingerprint FROM poll_events
WHERE $1::text IS NULL OR poll_id = $1 ORDER BY seq`

// pgEpoch is PostgreSQL's epoch, 2000-01-01T00:00:00Z, in Unix
// microseconds: a timestamptz in binary is microseconds from it.
const pgEpoch = 946_684_800_000_000

// passRows calls fn for each row of passRowsSQL with its poll id (valid
// only during the call). It reads the binary values as they come, one
// string allocated per row for its candidate, principal, key and
// fingerprint, rather than scanning each into values of its own: most of
// what the pass costs the client is reading its rows.
func passRows(ctx context.Context, tx pgx.Tx, pollID *string, fn func(poll []byte, r passRow)) error {
	rows, err := tx.Query(ctx, passRowsSQL, pollID)
	if err != nil {
		return err
	}
	defer rows.Close()
	// Text is the same bytes in either format; seq, received_at and the
	// fingerprint must come in binary.
	for _, i := range []int{0, 5, 6} {
		if f := rows.FieldDescriptions()[i]; f.Format != pgx.BinaryFormatCode {
			return fmt.Errorf("read the ledger for its logs: column %s came in text, the pass reads it in binary", f.Name)
		}
	}
	var buf []byte
	for rows.Next() {
		v := rows.RawValues()
		if len(v) != 7 || len(v[0]) != 8 || len(v[5]) != 8 {
			return errors.New("read the ledger for its logs: a row not of the form asked for")
		}
		buf = append(append(append(append(buf[:0], v[2]...), v[3]...), v[4]...), v[6]...)
		all := string(buf)
		a, b, c := len(v[2]), len(v[2])+len(v[3]), len(v[2])+len(v[3])+len(v[4])
		fn(v[1], passRow{
			seq:  int64(binary.BigEndian.Uint64(v[0])),
			cand: all[:a], pr: all[a:b], key: all[b:c], fp: all[c:],
			received: time.UnixMicro(pgEpoch + int64(binary.BigEndian.Uint64(v[5]))).UTC(),
		})
	}
	return rows.Err()
}
