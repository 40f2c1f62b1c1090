package ledger

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/tlog"

	"tally/audit"
)

// This file keeps each poll's Merkle log in PostgreSQL, in the append's
// own transaction: lock the heads of the batch's polls before the first
// insert (which makes leaf indexes dense and in commit order: appends to
// one poll take turns from the lock to the commit, appends to different
// polls do not meet), give each new row the next leaf index of its poll,
// then hash the new leaves and write the full tiles and the heads. The
// ledger, the projection and the log commit together or not at all.

// logHead is one poll's head as an append holds it.
type logHead struct {
	state  logState
	built  bool  // false: rows from before the log still to hash (root NULL)
	next   int64 // the leaf index the next new row gets
	leaves []newLeaf
}

// newLeaf is a row the append inserted: its leaf index and its event.
type newLeaf struct {
	index int64
	event int
}

const lockHeadsSQL = `
SELECT poll_id, size, root, partial FROM poll_log_heads
WHERE poll_id = ANY($1::text[]) ORDER BY poll_id FOR UPDATE`

// lockHeads locks and reads the heads of the polls of events, in poll
// order (so two appends lock shared heads in the same order). A poll that
// does not exist has no head; its events are rejected. A head whose rows
// predate the log is built first.
func lockHeads(ctx context.Context, tx pgx.Tx, events []Event) (map[string]*logHead, error) {
	var polls []string
	for _, e := range events {
		polls = append(polls, e.PollID)
	}
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
	for poll, h := range heads {
		if !h.built {
			if err := buildLog(ctx, tx, poll, h); err != nil {
				return nil, err
			}
		}
	}
	return heads, nil
}

func headFromRow(size int64, root, partial []byte) (*logHead, error) {
	h := &logHead{next: size}
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

// nextLeaves lists, for the insert statements, each poll's next leaf
// index.
func nextLeaves(heads map[string]*logHead) (polls []string, next []int64) {
	for p, h := range heads {
		polls = append(polls, p)
		next = append(next, h.next)
	}
	return polls, next
}

// addLeaf notes a row an insert made, with the leaf index the statement
// gave it.
func (h *logHead) addLeaf(index int64, event int) {
	h.leaves = append(h.leaves, newLeaf{index: index, event: event})
	h.next = max(h.next, index+1)
}

const writeLogsSQL = `
WITH tiles AS (
    INSERT INTO poll_log_tiles (poll_id, level, idx, hashes)
    SELECT * FROM unnest($1::text[], $2::smallint[], $3::bigint[], $4::bytea[])
)
UPDATE poll_log_heads h SET size = u.size, root = u.root, partial = u.partial, updated_at = now()
FROM unnest($5::text[], $6::bigint[], $7::bytea[], $8::bytea[]) AS u(poll_id, size, root, partial)
WHERE h.poll_id = u.poll_id`

// logWrites gathers the tiles and heads of one append, for writeLogsSQL.
type logWrites struct {
	tilePolls []string
	levels    []int16
	idxs      []int64
	tiles     [][]byte
	headPolls []string
	sizes     []int64
	roots     [][]byte
	partials  [][]byte
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
	_, err := tx.Exec(ctx, writeLogsSQL, w.tilePolls, w.levels, w.idxs, w.tiles, w.headPolls, w.sizes, w.roots, w.partials)
	return interpretError(what, err)
}

// appendLogs hashes the rows the append inserted into their polls' logs
// and writes the new tiles and heads.
func appendLogs(ctx context.Context, tx pgx.Tx, heads map[string]*logHead, events []Event) error {
	var w logWrites
	for poll, h := range heads {
		if len(h.leaves) == 0 {
			continue
		}
		slices.SortFunc(h.leaves, func(a, b newLeaf) int { return int(a.index - b.index) })
		hashes := make([]tlog.Hash, len(h.leaves))
		for i, l := range h.leaves {
			if l.index != h.state.size+int64(i) {
				return fmt.Errorf("append batch: poll %s: leaf %d follows a log of size %d: the leaf indexes are not dense", poll, l.index, h.state.size+int64(i))
			}
			var err error
			if hashes[i], err = leafHash(events[l.event]); err != nil {
				return fmt.Errorf("append batch: %w", err)
			}
		}
		next, full, err := h.state.extend(hashes)
		if err != nil {
			return fmt.Errorf("append batch: poll %s: %w", poll, err)
		}
		h.state, h.leaves = next, nil
		w.add(poll, next, full)
	}
	return w.exec(ctx, tx, "append batch: write the logs")
}

func leafHash(e Event) (tlog.Hash, error) {
	return audit.LeafHash(audit.Leaf{PollID: e.PollID, CandidateID: e.CandidateID, PrincipalID: e.PrincipalID,
		ClientEventID: e.ClientEventID, ReceivedAt: e.ReceivedAt})
}

// buildChunk is how many leaves buildLog hashes at a time.
const buildChunk = 1 << 16

const logRowsSQL = `
SELECT leaf_index, candidate_id, principal_id, client_event_id, received_at
FROM poll_events WHERE poll_id = $1 ORDER BY leaf_index`

// buildLog hashes every row of a poll whose rows predate its log (its head
// has no root) and writes its tiles and head, in tx, which holds the head.
func buildLog(ctx context.Context, tx pgx.Tx, poll string, h *logHead) error {
	state, full, n, err := hashRows(ctx, tx, poll, nil)
	if err != nil {
		return err
	}
	if n != h.next {
		return fmt.Errorf("build the log of poll %s: %d rows, but its head counts %d", poll, n, h.next)
	}
	var w logWrites
	w.add(poll, state, full)
	if err := w.exec(ctx, tx, "build the log of poll "+poll); err != nil {
		return err
	}
	h.state, h.built = state, true
	return nil
}

// hashRows reads a poll's rows in leaf order and returns its log, the full
// tiles and the number of rows. A gap or a repeat in the leaf indexes is an
// error naming the leaf. onTile, when set, sees every full tile as it is
// made (the rebuild compares them with the stored ones).
func hashRows(ctx context.Context, tx pgx.Tx, poll string, onTile func(fullTile)) (logState, []fullTile, int64, error) {
	what := "hash the log of poll " + poll
	rows, err := tx.Query(ctx, logRowsSQL, poll)
	if err != nil {
		return logState{}, nil, 0, interpretError(what, err)
	}
	state := emptyLog()
	var all []fullTile
	chunk := make([]tlog.Hash, 0, buildChunk)
	flush := func() error {
		next, full, err := state.extend(chunk)
		if err != nil {
			return err
		}
		state, chunk = next, chunk[:0]
		if onTile != nil {
			for _, t := range full {
				onTile(t)
			}
			return nil
		}
		all = append(all, full...)
		return nil
	}
	var n int64
	var leaf int64
	e := Event{PollID: poll}
	_, err = pgx.ForEachRow(rows, []any{&leaf, &e.CandidateID, &e.PrincipalID, &e.ClientEventID, &e.ReceivedAt}, func() error {
		if leaf != n {
			return &LogError{PollID: poll, Leaf: n, Problem: leafGap(n, leaf)}
		}
		h, err := leafHash(e)
		if err != nil {
			return fmt.Errorf("leaf %d: %w", leaf, err)
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
		return logState{}, nil, 0, interpretError(what, err)
	}
	return state, all, n, nil
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
			heads, err := lockHeads(ctx, tx, []Event{{PollID: poll}})
			if err == nil && heads[poll] == nil {
				err = fmt.Errorf("build the log of poll %s: it has no head", poll)
			}
			return err
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
