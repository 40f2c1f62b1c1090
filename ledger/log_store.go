package ledger

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/tlog"

	"tally/audit"
	"tally/vote"
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
	heads := make(map[string]*logHead, len(polls))
	var (
		poll    string
		size    int64
		root    []byte
		partial []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&poll, &size, &root, &partial}, func() error {
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
WITH leaves AS (
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
WHERE h.poll_id = u.poll_id`

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

func (w *logWrites) exec(ctx context.Context, tx pgx.Tx, what string) error {
	if len(w.headPolls) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, writeLogsSQL, w.leafPolls, w.firsts, w.seqs, w.minSeqs, w.maxSeqs,
		w.tilePolls, w.levels, w.idxs, w.tiles, w.headPolls, w.sizes, w.roots, w.partials)
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
// notes the leaves, and writes them with the new tiles and heads. A poll
// whose log is still to build is built with them.
func appendLogs(ctx context.Context, tx pgx.Tx, events []Event, outcomes []Outcome) error {
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
	if len(polls) == 0 || logOff {
		return nil
	}
	heads, err := lockHeads(ctx, tx, polls)
	if err != nil {
		return err
	}
	var w logWrites
	for _, poll := range polls {
		h, leaves := heads[poll], added[poll]
		if h == nil {
			return fmt.Errorf("append batch: poll %s has rows but no log head", poll)
		}
		if !h.built {
			if err := buildLog(ctx, tx, poll, h, int64(len(leaves))); err != nil {
				return err
			}
			continue
		}
		// leaves are in batch order already: outcomes are.
		hashes := make([]tlog.Hash, len(leaves))
		seqs := make([]int64, len(leaves))
		for i, l := range leaves {
			if hashes[i], err = leafHash(events[l.event]); err != nil {
				return fmt.Errorf("append batch: %w", err)
			}
			seqs[i] = l.seq
		}
		next, full, err := h.state.extend(hashes)
		if err != nil {
			return fmt.Errorf("append batch: poll %s: %w", poll, err)
		}
		w.addLeaves(poll, h.state.size, seqs)
		w.add(poll, next, full)
		h.state = next
	}
	return w.exec(ctx, tx, "append batch: write the logs")
}

func leafHash(e Event) (tlog.Hash, error) {
	return audit.LeafHash(audit.Leaf{PollID: e.PollID, CandidateID: e.CandidateID, PrincipalID: e.PrincipalID,
		ClientEventID: e.ClientEventID, ReceivedAt: e.ReceivedAt})
}

// buildChunk is how many leaves buildLog hashes at a time.
const buildChunk = 1 << 16

// logRowsSQL reads a poll's leaves in leaf order, each with its ledger
// row: NULLs where the row is gone.
const logRowsSQL = `
SELECT l.first_leaf + s.ord - 1, s.seq, e.poll_id, e.candidate_id, e.principal_id, e.client_event_id, e.received_at, e.fingerprint
FROM poll_log_leaves l
CROSS JOIN LATERAL unnest(l.seqs) WITH ORDINALITY AS s(seq, ord)
LEFT JOIN poll_events e ON e.seq = s.seq
WHERE l.poll_id = $1
ORDER BY l.first_leaf, s.ord`

// numberRowsSQL gives the rows of a poll that are in no leaf yet the
// next leaves, in the order of seq, buildChunk to a poll_log_leaves row:
// all its rows for a ledger from before the log, none for a log whose
// tiles are made again (migration 00009), the append's own for an append
// that builds its poll's log.
const numberRowsSQL = `
WITH next AS (
    SELECT coalesce(max(first_leaf + cardinality(seqs)), 0) AS leaf FROM poll_log_leaves WHERE poll_id = $1
)
INSERT INTO poll_log_leaves (poll_id, first_leaf, seqs, min_seq, max_seq)
SELECT $1, (SELECT leaf FROM next) + r.n / 65536 * 65536, array_agg(r.seq ORDER BY r.seq), min(r.seq), max(r.seq)
FROM (SELECT e.seq, row_number() OVER (ORDER BY e.seq) - 1 AS n
      FROM poll_events e
      LEFT JOIN (SELECT unnest(seqs) AS seq FROM poll_log_leaves WHERE poll_id = $1) l ON l.seq = e.seq
      WHERE e.poll_id = $1 AND l.seq IS NULL) r
GROUP BY r.n / 65536 ORDER BY 2`

// buildLog hashes every leaf of a poll whose head has no root (rows from
// before the log, or tiles to make again), numbering first its rows in
// no leaf (added of them are the append's own), and writes its leaves,
// tiles and head, in tx, which holds the head.
func buildLog(ctx context.Context, tx pgx.Tx, poll string, h *logHead, added int64) error {
	what := "build the log of poll " + poll
	if _, err := tx.Exec(ctx, numberRowsSQL, poll); err != nil {
		return interpretError(what, err)
	}
	state, full, n, _, err := hashRows(ctx, tx, poll)
	if err != nil {
		return err
	}
	if n != h.size+added {
		return fmt.Errorf("%s: %d leaves, but its head counts %d and the append added %d: run tally rebuild, which names what differs", what, n, h.size, added)
	}
	var w logWrites
	w.add(poll, state, full)
	if err := w.exec(ctx, tx, what); err != nil {
		return err
	}
	h.state, h.built = state, true
	return nil
}

// hashRows reads a poll's rows in leaf order and returns its log, the full
// tiles, the number of leaves, and the first leaf whose stored fingerprint
// is not vote.Fingerprint of its poll and candidate (-1: none; the leaf
// hash leaves the fingerprint out, yet an append compares it to tell a
// redelivered event from a key reused for another answer). A gap or a
// repeat in the leaf indexes, or a leaf whose row is gone or of another
// poll, is a *LogError naming the leaf.
func hashRows(ctx context.Context, tx pgx.Tx, poll string) (state logState, all []fullTile, n, badFP int64, err error) {
	what := "hash the log of poll " + poll
	rows, err := tx.Query(ctx, logRowsSQL, poll)
	if err != nil {
		return logState{}, nil, 0, -1, interpretError(what, err)
	}
	state, badFP = emptyLog(), -1
	chunk := make([]tlog.Hash, 0, buildChunk)
	flush := func() error {
		next, full, err := state.extend(chunk)
		if err != nil {
			return err
		}
		state, chunk = next, chunk[:0]
		all = append(all, full...)
		return nil
	}
	fps := map[string][32]byte{} // by candidate
	var (
		leaf, seq         int64
		rowPoll, cand, pr *string
		key               *string
		received          *time.Time
		fp                []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&leaf, &seq, &rowPoll, &cand, &pr, &key, &received, &fp}, func() error {
		if leaf != n {
			return &LogError{PollID: poll, Leaf: n, Problem: leafGap(n, leaf)}
		}
		switch {
		case rowPoll == nil:
			return &LogError{PollID: poll, Leaf: leaf, Problem: fmt.Sprintf("its ledger row (seq %d) is missing: it was deleted", seq)}
		case *rowPoll != poll:
			return &LogError{PollID: poll, Leaf: leaf, Problem: fmt.Sprintf("its ledger row (seq %d) is poll %s's: the row was changed or the leaf moved", seq, *rowPoll)}
		}
		h, err := leafHash(Event{PollID: poll, CandidateID: *cand, PrincipalID: *pr, ClientEventID: *key, ReceivedAt: *received})
		if err != nil {
			return fmt.Errorf("leaf %d: %w", leaf, err)
		}
		want, ok := fps[*cand]
		if !ok {
			want = vote.Fingerprint(poll, *cand)
			fps[*cand] = want
		}
		if badFP < 0 && !bytes.Equal(fp, want[:]) {
			badFP = leaf
		}
		chunk = append(chunk, h)
		n++
		if len(chunk) == buildChunk {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return logState{}, nil, 0, -1, interpretError(what, err)
	}
	return state, all, n, badFP, nil
}

func leafGap(want, got int64) string {
	if got < want {
		return fmt.Sprintf("leaf index %d appears twice", got)
	}
	return fmt.Sprintf("leaf %d is missing (the next row is leaf %d)", want, got)
}

// LogError names a discrepancy in a poll's log: the poll, the first leaf
// concerned and what is wrong.
type LogError struct {
	PollID  string
	Leaf    int64
	Problem string
}

func (e *LogError) Error() string {
	return fmt.Sprintf("poll %s, leaf %d: %s", e.PollID, e.Leaf, e.Problem)
}

// BuildLogs hashes the rows of every poll whose log is still to build (rows
// from before the log existed; see migration 00004), one poll per
// transaction, and returns how many it built. `tally migrate up` runs it;
// an append to such a poll would build its log itself.
func (s *Store) BuildLogs(ctx context.Context) (int, error) {
	rows, err := s.pool.Query(ctx, `SELECT poll_id FROM poll_log_heads WHERE root IS NULL ORDER BY poll_id`)
	if err != nil {
		return 0, interpretError("list the logs to build", err)
	}
	polls, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, interpretError("list the logs to build", err)
	}
	built := 0
	for _, poll := range polls {
		start := time.Now()
		err := s.runTx(ctx, "build the log of poll "+poll, pgx.TxOptions{}, func(tx pgx.Tx) error {
			heads, err := lockHeads(ctx, tx, []string{poll})
			switch {
			case err != nil:
				return err
			case heads[poll] == nil:
				return fmt.Errorf("build the log of poll %s: it has no head", poll)
			case heads[poll].built:
				return nil // an append built it meanwhile
			}
			return buildLog(ctx, tx, poll, heads[poll], 0)
		})
		if err != nil {
			return built, err
		}
		built++
		s.cfg.Logger.Info("built a poll's log from its rows", "poll", poll, "took", time.Since(start).Round(time.Millisecond))
	}
	return built, nil
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
