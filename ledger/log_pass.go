package ledger

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"tally/audit"
	"tally/vote"
)

// This file owns the rebuild's one pass over the ledger: every row read
// once, in the table's order, and handed to its poll's hasher, which
// hashes the poll's rows in leaf order on a goroutine of its own. Per poll
// it yields what hashRows does (log_build.go), without a lookup of each
// leaf's row by its seq and without sorting the rows in leaf order, which
// is most of what hashRows costs PostgreSQL.
//
// A poll's leaves are mostly in seq order (numberRowsSQL numbers by seq;
// appends commit nearly in the order they drew their seqs), and so are
// the table's rows, but for runs of rows that concurrent appends wrote to
// pages of their own: reading them as they lie (a sequential scan) costs
// PostgreSQL less than an index scan in seq order. A row that comes before
// its turn waits, in the order it came, until its leaf is next (rows that
// come out of seq order among those, in a small table). A
// poll whose leaves do not line up with its rows (a leaf whose row is
// gone or another poll's, a seq in two leaves, leaves not numbered one
// after another) stalls or is seen to be malformed; it is left out of
// the pass's result, and verifyLogs checks it the per-poll way, which
// names its first wrong leaf.
//
// Each poll's batches, their text and its hasher's chunk of hashes are
// sized by the leaves it has left (at most passBatch), and a poll's hasher
// ends at its last leaf: a ledger of many small polls costs the pass what
// their rows do, not a fixed amount a poll.
//
// The reader makes the recount as it goes: it numbers each poll's
// distinct answers and counts the rows by number, and the hasher keeps
// what it learns of an answer (its fingerprint, the definition's
// judgment of its ballot) by the same number. What the hasher gets of a
// row is its seq, its time, that number and its principal, key and
// fingerprint in a string shared by a batch of rows: reading and handing
// on a row allocates nothing of its own.

// passPending bounds the rows a poll may hold waiting for their leaf. A
// poll past it is left to the per-poll check.
const passPending = 1 << 18

// passBatch is how many rows go to a poll's hasher at once.
const passBatch = 1 << 12

// passRow is a ledger row as the pass hands it to its poll's hasher: its
// answer by number (the poll's answers, passPoll.answers), or, past
// maxFingerprintsHeld of them, in its batch's text; its principal and
// key in its batch's text, one after the other from start; and whether
// its fingerprint is wrong, which the reader checks as the row comes (a
// fingerprint is of the poll and the answer alone: each numbered answer's
// is computed once).
// The rows of a batch share that one string, rather than a string each:
// most of what the pass costs the client is reading its rows.
//
// A definition's leaf is a passRow of seq -id (its id in poll_definitions),
// not a row. A passRow holds no pointer, so a batch of them is no work for
// the garbage collector.
type passRow struct {
	seq      int64
	received int64 // microseconds since the Unix epoch
	answer   int32 // -1: text[start:a]
	start    int32
	a, p     int32 // the ends of the answer and the principal; the key ends at end
	end      int32 // in text
	fpWrong  bool  // the row's fingerprint is not vote.Fingerprint of its poll and answer
}

// heldRow is a row held until its leaf is next, with its own text.
type heldRow struct {
	row  passRow
	text []byte
}

// passWork is a batch of a poll's rows, in leaf order, for its hasher,
// which owns rows and text until it hands them back.
type passWork struct {
	rows    []passRow
	text    []byte
	answers []string // the poll's answers so far, by number
}

// passSpares is how many used batches of rows a poll's hasher hands back
// to the reader to fill again, rather than the reader making new ones.
const passSpares = 3

// passText is the room a batch's text is made with: about the text of
// passBatch rows.
const passText = passBatch * 32

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
	// tiles is the comparison of full with the stored tiles, when the
	// hasher made it (tilesCompared).
	tilesCompared bool
	tiles         tileVerdict
	// last, of a poll of answers latest, are its principals' last answers
	// in leaf order counted by answer (nil: not kept, log_pass_latest.go).
	last map[string]int64
}

// tileVerdict is firstTileDifference's answer: the first leaf under the
// first hash that differs, and what differs ("": nothing).
type tileVerdict struct {
	leaf int64
	what string
}

// passPoll is one poll in the pass.
type passPoll struct {
	id      string
	size    int64   // its head's
	seqs    []int64 // its leaves' rows, in leaf order
	next    int     // the leaf whose row comes next
	pending map[int64]heldRow
	ahead   aheadRows
	defs    map[int64]*audit.Definition // every poll's, by id
	tiles   *sideReader                 // the stored tiles, when read beside the pass
	last    *lastAnswers                // of a poll of answers latest, for its hasher
	rows    int64
	failed  bool // left to the per-poll check

	// The poll's distinct answers, numbered in the order they come, and
	// its rows counted by answer: the recount.
	number  map[string]int32
	answers []string
	counts  []int64
	fps     [][32]byte       // vote.Fingerprint of the poll and each answer
	others  map[string]int64 // the answers past maxFingerprintsHeld

	batch  []passRow
	text   []byte // the batch's
	work   chan passWork
	closed bool          // work is closed
	spares chan passWork // batches the hasher is done with
	done   chan struct{}
	out    hashed
	err    error // the hasher's
}

// tallyKey is a (poll, candidate) the pass counts the rows of.
type tallyKey struct{ poll, cand string }

// hashInOnePass hashes the logs of heads (one poll's when pollID is set)
// in one pass over the ledger, in tx's snapshot. It returns the polls it
// could hash (the others are for the per-poll check) and the count of
// the ledger's rows of each (poll, candidate), the recount, which the
// pass makes as it reads every row anyway. polls are newPassPolls of
// heads. Given the reader beside it (side, or nil), which reads the
// leaves and the definitions while the rows come here, and then the
// stored tiles, each poll's hasher compares its poll's tiles once it has
// hashed its last row, while the others still hash.
func hashInOnePass(ctx context.Context, tx pgx.Tx, polls map[string]*passPoll, pollID string, side *sideReader) (map[string]*hashed, map[tallyKey]int64, error) {
	p := optional(pollID)
	for _, pp := range polls {
		pp.tiles = side
	}
	defer func() {
		for _, pp := range polls {
			pp.stop()
		}
	}()
	pr := passReader{polls: polls, side: side, counts: map[tallyKey]int64{}}
	if err := pr.read(ctx, tx, p); err != nil {
		return nil, nil, err
	}
	for id, pp := range polls {
		for i, answer := range pp.answers {
			pr.counts[tallyKey{id, answer}] += pp.counts[i]
		}
		for answer, n := range pp.others {
			pr.counts[tallyKey{id, answer}] += n
		}
	}
	return passResults(polls), pr.counts, nil
}

// passReader reads the pass's rows and hands each to its poll.
type passReader struct {
	polls     map[string]*passPoll
	side      *sideReader
	counts    map[tallyKey]int64 // the recount: here the rows of polls without a head
	ready     bool               // the polls have their leaves
	held      int                // rows taken before they had
	leavesErr error              // the reader beside's, from leavesIn
}

// read reads every row (one poll's when pollID is set). Without the
// reader beside, the leaves are read first, in tx. With it, they are read
// there while the rows come here: the rows that come first wait, as rows
// that come early do, until the leaves are in.
func (pr *passReader) read(ctx context.Context, tx pgx.Tx, pollID *string) error {
	pr.ready = pr.side == nil
	if pr.ready {
		set, err := readLeafSet(ctx, tx, pr.polls, pollID)
		if err != nil {
			return err
		}
		set.install(pr.polls)
	}
	err := passRows(ctx, tx, pollID, pr.row)
	if err == nil && !pr.ready {
		err = pr.leavesIn()
	}
	switch {
	case pr.leavesErr != nil:
		return pr.leavesErr
	case err != nil:
		return interpretError("read the ledger for its logs", err)
	}
	return nil
}

// row is the next row of the table, of poll.
func (pr *passReader) row(poll []byte, r *rawRow) error {
	if !pr.ready && (pr.held >= passHeldForLeaves || pr.side.leavesRead()) {
		if err := pr.leavesIn(); err != nil {
			return err
		}
	}
	pp := pr.polls[string(poll)]
	if pp == nil {
		pr.counts[tallyKey{string(poll), string(r.answer)}]++ // a poll without a head
		return nil
	}
	answer := pp.count(r.answer)
	if !pp.failed { // else left to the per-poll check
		pr.held++
		pp.take(r, answer, !pp.fingerprintRight(answer, r))
	}
	return nil
}

// leavesIn waits for the reader beside to have read the leaves and gives
// them to the polls.
func (pr *passReader) leavesIn() error {
	set, err := pr.side.waitLeaves()
	if err != nil {
		pr.leavesErr = err
		return err
	}
	set.install(pr.polls)
	pr.ready = true
	return nil
}

// passResults are the polls the pass hashed whole, once their hashers are
// done. Every hasher gets its last rows before any is waited for: they
// hash them side by side.
func passResults(polls map[string]*passPoll) map[string]*hashed {
	for _, pp := range polls {
		if !pp.failed && pp.next == len(pp.seqs) {
			pp.flush()
			pp.close()
		}
	}
	out := map[string]*hashed{}
	for id, pp := range polls {
		if pp.failed || pp.next < len(pp.seqs) {
			continue
		}
		pp.stop()
		if pp.err != nil {
			continue
		}
		h := pp.out
		h.rows = pp.rows
		out[id] = &h
	}
	return out
}

// newPassPolls are the polls of heads the pass is to hash: those whose
// log is built. The hashers of the polls in latest (of answers latest)
// keep their principals' last answers.
func newPassPolls(heads []logHeadRow, latest map[string]bool) map[string]*passPoll {
	polls := make(map[string]*passPoll, len(heads))
	room := new(atomic.Int64) // for the last answers of every poll of answers latest
	room.Store(maxLastHeld)
	for _, h := range heads {
		if h.root == nil {
			continue // still to build: the per-poll check says so
		}
		pp := &passPoll{id: h.poll, size: max(h.size, 0), pending: map[int64]heldRow{}, number: map[string]int32{}, others: map[string]int64{},
			out: hashed{state: emptyLog(), badFP: -1}}
		if latest[h.poll] {
			pp.last = newLastAnswers(room)
		}
		polls[h.poll] = pp
	}
	return polls
}

// count counts a row of the poll whose answer is answer, and returns the
// answer's number (-1: past maxFingerprintsHeld, not numbered).
func (pp *passPoll) count(answer []byte) int32 {
	if i, ok := pp.number[string(answer)]; ok {
		pp.counts[i]++
		return i
	}
	if len(pp.answers) >= maxFingerprintsHeld {
		pp.others[string(answer)]++
		return -1
	}
	i, a := int32(len(pp.answers)), string(answer)
	pp.number[a] = i
	pp.answers, pp.counts = append(pp.answers, a), append(pp.counts, 1)
	pp.fps = append(pp.fps, vote.Fingerprint(pp.id, a))
	return i
}

// fingerprintRight reports whether r's fingerprint is that of the poll
// and its answer, whose number is answer.
func (pp *passPoll) fingerprintRight(answer int32, r *rawRow) bool {
	if answer >= 0 {
		return string(r.fp) == string(pp.fps[answer][:])
	}
	want := vote.Fingerprint(pp.id, string(r.answer))
	return string(r.fp) == string(want[:])
}

// rawRow is a row of passRowsSQL as passRows reads it: its slices are
// valid only during the call it is given to.
type rawRow struct {
	seq, received              int64 // received: microseconds since the Unix epoch
	answer, principal, key, fp []byte
}

// passRows calls fn for each row of passRowsSQL with its poll id (valid,
// as the row, only during the call), until fn fails. It reads the binary values as they
// come, without a scan into values of their own.
func passRows(ctx context.Context, tx pgx.Tx, pollID *string, fn func(poll []byte, r *rawRow) error) error {
	// The rows in the table's order, from one process: a parallel plan
	// would interleave its workers' pages, a synchronized scan start
	// midway.
	if _, err := tx.Exec(ctx, `SELECT set_config('max_parallel_workers_per_gather', '0', true), set_config('synchronize_seqscans', 'off', true)`); err != nil {
		return err
	}
	var (
		rows pgx.Rows
		err  error
	)
	if pollID == nil {
		rows, err = tx.Query(ctx, passRowsSQL)
	} else {
		rows, err = tx.Query(ctx, passPollRowsSQL, *pollID)
	}
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
	var r rawRow
	for rows.Next() {
		v := rows.RawValues()
		if len(v) != 7 || len(v[0]) != 8 || len(v[5]) != 8 {
			return errors.New("read the ledger for its logs: a row not of the form asked for")
		}
		r.seq, r.received = int64(binary.BigEndian.Uint64(v[0])), pgEpoch+int64(binary.BigEndian.Uint64(v[5]))
		r.answer, r.principal, r.key, r.fp = v[2], v[3], v[4], v[6]
		if err := fn(v[1], &r); err != nil {
			return err
		}
	}
	return rows.Err()
}
