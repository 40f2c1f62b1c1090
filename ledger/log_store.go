package ledger

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/tlog"

	"tally/audit"
)

// This file keeps each poll's Merkle log in PostgreSQL, in the append's
// own transaction. After both insert steps, the append locks the heads of
// the polls it added rows to (in poll order), numbers its new rows from
// each head's size, in batch order, writes one poll_log_leaves row per poll
// (the seqs in leaf order), hashes the new leaves and writes the full
// tiles and the heads. Appends to one poll take turns from the lock to the
// commit, which makes each poll's leaves dense and in commit order;
// appends to different polls do not meet. The ledger, the projection and
// the log commit together or not at all.

// logHead is one poll's head as an append holds it.
type logHead struct {
	state logState
	built bool  // false: rows from before the log still to hash (root NULL)
	size  int64 // the stored size (for a head still to build: its rows)
}

const lockHeadsSQL = `
SELECT poll_id, size, root, partial FROM poll_log_heads
WHERE poll_id = ANY($1::text[]) ORDER BY poll_id FOR UPDATE`

// lockHeads locks and reads the heads of polls, in poll order (so two
// appends lock shared heads in the same order). A poll that does not exist
// has no head.
func lockHeads(ctx context.Context, tx pgx.Tx, polls []string) (map[string]*logHead, error) {
	slices.Sort(polls)
	polls = slices.Compact(polls)
	rows, err := tx.Query(ctx, lockHeadsSQL, polls)
	if err != nil {
		return nil, interpretError("append batch: lock log heads", err)
	}
	return readHeads(rows, len(polls))
}

// readHeads reads the rows of lockHeadsSQL.
func readHeads(rows pgx.Rows, n int) (map[string]*logHead, error) {
	heads := make(map[string]*logHead, n)
	var (
		poll    string
		size    int64
		root    []byte
		partial []byte
	)
	_, err := pgx.ForEachRow(rows, []any{&poll, &size, &root, &partial}, func() error {
		h, err := headFromRow(size, root, partial)
		if err != nil {
			return fmt.Errorf("poll %s: %w", poll, err)
		}
		heads[poll] = h
		return nil
	})
	if err != nil {
		return nil, interpretError("append batch: lock log heads", err)
	}
	return heads, nil
}

func headFromRow(size int64, root, partial []byte) (*logHead, error) {
	h := &logHead{size: size}
	if root == nil {
		return h, nil
	}
	if len(root) != hashSize {
		return nil, fmt.Errorf("log head: root of %d bytes", len(root))
	}
	levels, err := splitPartial(size, partial)
	if err != nil {
		return nil, err
	}
	h.state = logState{size: size, root: tlog.Hash(root), partial: levels}
	h.built = true
	return h, nil
}

const writeLogsSQL = `
WITH outside AS (
    SELECT 1 FROM unnest($14::text[], $15::timestamptz[], $16::timestamptz[]) AS v(poll_id, first_at, last_at)
    JOIN polls p ON p.id = v.poll_id
    WHERE NOT (poll_open_at(p.opens_at, p.closes_at, v.first_at) AND poll_open_at(p.opens_at, p.closes_at, v.last_at))
), leaves AS (
    INSERT INTO poll_log_leaves (poll_id, first_leaf, seqs, min_seq, max_seq)
    SELECT poll_id, first_leaf, seqs::bigint[], min_seq, max_seq
    FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bigint[], $5::bigint[]) AS l(poll_id, first_leaf, seqs, min_seq, max_seq)
    ORDER BY poll_id
), tiles AS (
    INSERT INTO poll_log_tiles (poll_id, level, idx, hashes)
    SELECT * FROM unnest($6::text[], $7::smallint[], $8::bigint[], $9::bytea[])
)
UPDATE poll_log_heads h SET size = u.size, root = u.root, partial = u.partial, updated_at = now()
FROM unnest($10::text[], $11::bigint[], $12::bytea[], $13::bytea[]) AS u(poll_id, size, root, partial)
WHERE h.poll_id = u.poll_id AND NOT EXISTS (SELECT 1 FROM outside)`

// logWrites gathers the leaves, tiles and heads of one append, for
// writeLogsSQL. Each poll's new seqs go as one array literal: a text
// parameter per poll costs less to send than a bigint and a poll name per
// leaf.
type logWrites struct {
	leafPolls []string
	firsts    []int64
	seqs      []string
	minSeqs   []int64
	maxSeqs   []int64
	tilePolls []string
	levels    []int16
	idxs      []int64
	tiles     [][]byte
	headPolls []string
	sizes     []int64
	roots     [][]byte
	partials  [][]byte
	// The received_at span of the new votes of each poll (winPolls), which
	// writeLogsSQL checks against the poll's window as it stands once the
	// heads are held: see definitions.go.
	winPolls        []string
	firstAt, lastAt []time.Time
}

// addLeaves notes seqs as the leaves of poll from first on.
func (w *logWrites) addLeaves(poll string, first int64, seqs []int64) {
	lit := make([]byte, 0, 2+len(seqs)*12)
	lit = append(lit, '{')
	for i, seq := range seqs {
		if i > 0 {
			lit = append(lit, ',')
		}
		lit = strconv.AppendInt(lit, seq, 10)
	}
	lit = append(lit, '}')
	w.leafPolls = append(w.leafPolls, poll)
	w.firsts = append(w.firsts, first)
	w.seqs = append(w.seqs, string(lit))
	w.minSeqs = append(w.minSeqs, slices.Min(seqs))
	w.maxSeqs = append(w.maxSeqs, slices.Max(seqs))
}

func (w *logWrites) add(poll string, s logState, full []fullTile) {
	for _, t := range full {
		w.tilePolls = append(w.tilePolls, poll)
		w.levels = append(w.levels, int16(t.level))
		w.idxs = append(w.idxs, t.idx)
		w.tiles = append(w.tiles, t.data)
	}
	root := s.root
	w.headPolls = append(w.headPolls, poll)
	w.sizes = append(w.sizes, s.size)
	w.roots = append(w.roots, root[:])
	w.partials = append(w.partials, joinPartial(s.partial))
}

// addWindow notes the span of received_at of a poll's new votes.
func (w *logWrites) addWindow(poll string, first, last time.Time) {
	w.winPolls = append(w.winPolls, poll)
	w.firstAt = append(w.firstAt, first)
	w.lastAt = append(w.lastAt, last)
}

// exec writes the leaves, tiles and heads. When a new vote lies outside
// its poll's window as it now stands (a close committed while the append
// waited for the heads), no head is written, and it returns errRedefined:
// the transaction rolls back and the batch runs again.
func (w *logWrites) exec(ctx context.Context, tx pgx.Tx, what string) error {
	if len(w.headPolls) == 0 {
		return nil
	}
	tag, err := tx.Exec(ctx, writeLogsSQL, w.leafPolls, w.firsts, w.seqs, w.minSeqs, w.maxSeqs,
		w.tilePolls, w.levels, w.idxs, w.tiles, w.headPolls, w.sizes, w.roots, w.partials,
		w.winPolls, w.firstAt, w.lastAt)
	if err == nil && tag.RowsAffected() != int64(len(w.headPolls)) {
		err = errRedefined
	}
	return interpretError(what, err)
}

// newLeaf is a row the append inserted: its seq and its event.
type newLeaf struct {
	seq   int64
	event int
}

// appendLogs adds the rows the append inserted (the recorded outcomes) to
// their polls' logs, in batch order (the stream's, or an import file's, so
// an export imported elsewhere gets the same leaves): it locks the heads of
// their polls,
// notes the leaves, and writes them with the new tiles and heads, checking
// the votes against their polls' windows as they stand once the heads are
// held (a close commits under the same lock: see definitions.go). A poll whose log is still to build is built with them.
// It returns each poll's head as it found it under the lock and as it
// leaves it.
func appendLogs(ctx context.Context, tx pgx.Tx, events []Event, outcomes []Outcome) (map[string]headMove, error) {
	added := map[string][]newLeaf{}
	var polls []string
	for i, o := range outcomes {
		if o.Status != StatusRecorded {
			continue
		}
		p := events[i].PollID
		if added[p] == nil {
			polls = append(polls, p)
		}
		added[p] = append(added[p], newLeaf{seq: o.Seq, event: i})
	}
	if len(polls) == 0 {
		return nil, nil
	}
	heads, err := lockHeads(ctx, tx, polls)
	if err != nil {
		return nil, err
	}
	moves := make(map[string]headMove, len(heads))
	for poll, h := range heads {
		moves[poll] = headMove{from: -1}
		if h.built {
			moves[poll] = headMove{from: h.size, fromRoot: h.state.root}
		}
	}
	var w logWrites
	for _, poll := range polls {
		h, leaves := heads[poll], added[poll]
		if h == nil {
			return nil, fmt.Errorf("append batch: poll %s has rows but no log head", poll)
		}
		if !h.built {
			if err := buildLog(ctx, tx, poll, h, int64(len(leaves))); err != nil {
				return nil, err
			}
			continue
		}
		// leaves are in batch order already: outcomes are.
		hashes := make([]tlog.Hash, len(leaves))
		seqs := make([]int64, len(leaves))
		first, last := events[leaves[0].event].ReceivedAt, events[leaves[0].event].ReceivedAt
		for i, l := range leaves {
			e := events[l.event]
			if hashes[i], err = leafHash(e); err != nil {
				return nil, fmt.Errorf("append batch: %w", err)
			}
			seqs[i] = l.seq
			if e.ReceivedAt.Before(first) {
				first = e.ReceivedAt
			}
			if e.ReceivedAt.After(last) {
				last = e.ReceivedAt
			}
		}
		w.addWindow(poll, first, last)
		next, full, err := h.state.extend(hashes)
		if err != nil {
			return nil, fmt.Errorf("append batch: poll %s: %w", poll, err)
		}
		w.addLeaves(poll, h.state.size, seqs)
		w.add(poll, next, full)
		h.state = next
		m := moves[poll]
		m.to, m.toRoot = next.size, next.root
		moves[poll] = m
	}
	return moves, w.exec(ctx, tx, "append batch: write the logs")
}

// headMove is a poll's log head as an append found it under the lock
// (from, fromRoot; from is -1 for a log still to build) and as it leaves
// it (to, toRoot).
type headMove struct {
	from, to         int64
	fromRoot, toRoot tlog.Hash
}

func leafHash(e Event) (tlog.Hash, error) { return audit.LeafHash(leafOf(e)) }

// leafOf is e's leaf in its poll's log.
func leafOf(e Event) audit.Leaf {
	return audit.Leaf{PollID: e.PollID, CandidateID: e.CandidateID, Ballot: e.Ballot, PrincipalID: e.PrincipalID,
		ClientEventID: e.ClientEventID, ReceivedAt: e.ReceivedAt}
}

// LogHead is a poll's log as its head stores it: the tree's size and root.
type LogHead struct {
	PollID string
	Size   int64
	Root   tlog.Hash
}

// Head returns the head of pollID's log: ErrNotFound for a poll that does
// not exist, an error for a log still to build.
func (s *Store) Head(ctx context.Context, pollID string) (LogHead, error) {
	var size int64
	var root []byte
	err := s.pool.QueryRow(ctx, `SELECT size, root FROM poll_log_heads WHERE poll_id = $1`, pollID).Scan(&size, &root)
	if err != nil {
		return LogHead{}, interpretError("read the log head of poll "+pollID, err)
	}
	if len(root) != hashSize {
		return LogHead{}, fmt.Errorf("read the log head of poll %s: the log is still to build: run tally migrate up", pollID)
	}
	return LogHead{PollID: pollID, Size: size, Root: tlog.Hash(root)}, nil
}
