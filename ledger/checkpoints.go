package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/tlog"

	"tally/audit"
)

// This file keeps the signed checkpoints of each poll's log
// (poll_log_checkpoints, append-only like the ledger). The ledger does not
// sign: whoever holds the signer key (the projector, given one) asks which
// heads changed since their last checkpoint, signs them and hands the
// notes back. A checkpoint is only ever stored for a size the head has
// reached, so every stored checkpoint is a prefix of the current tree (I7).

// Checkpoint is one stored signed checkpoint of a poll's log.
type Checkpoint struct {
	PollID   string
	Size     int64
	Root     tlog.Hash
	Note     string // the signed note, as audit.SignCheckpoint made it
	SignedAt time.Time
}

// Stored returns the checkpoint in the form an export carries it
// (audit.WriteCheckpoint).
func (c Checkpoint) Stored() audit.StoredCheckpoint {
	return audit.StoredCheckpoint{PollID: c.PollID, Size: c.Size, Checkpoint: c.Note}
}

// unsignedHeadsSQL lists the heads whose size is not their latest
// checkpoint's: grown since, or never signed and not empty. A head whose
// root is NULL still has rows to hash (BuildLogs) and is left out.
const unsignedHeadsSQL = `
SELECT h.poll_id, h.size, h.root FROM poll_log_heads h
LEFT JOIN LATERAL (
    SELECT c.size FROM poll_log_checkpoints c WHERE c.poll_id = h.poll_id ORDER BY c.size DESC LIMIT 1
) c ON true
WHERE h.root IS NOT NULL AND ((c.size IS NULL AND h.size > 0) OR c.size <> h.size)
ORDER BY h.poll_id`

// UnsignedHeads returns, in poll order, the heads that have no checkpoint
// of their current size: what a signer should sign next.
func (s *Store) UnsignedHeads(ctx context.Context) ([]LogHead, error) {
	rows, err := s.pool.Query(ctx, unsignedHeadsSQL)
	if err != nil {
		return nil, interpretError("list unsigned log heads", err)
	}
	var (
		heads []LogHead
		h     LogHead
		root  []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&h.PollID, &h.Size, &root}, func() error {
		if len(root) != hashSize {
			return fmt.Errorf("poll %s: log head root of %d bytes", h.PollID, len(root))
		}
		h.Root = tlog.Hash(root)
		heads = append(heads, h)
		return nil
	})
	if err != nil {
		return nil, interpretError("list unsigned log heads", err)
	}
	return heads, nil
}

// addCheckpointSQL inserts a checkpoint only while the poll's head has
// reached its size, and reports the head as it found it and whether the
// row went in; an existing row of the same size is left as it is.
const addCheckpointSQL = `
WITH head AS (
    SELECT size, root FROM poll_log_heads WHERE poll_id = $1
), ins AS (
    INSERT INTO poll_log_checkpoints (poll_id, size, root, checkpoint)
    SELECT $1, $2, $3, $4 FROM head
    WHERE head.size > $2 OR (head.size = $2 AND head.root = $3)
    ON CONFLICT (poll_id, size) DO NOTHING
    RETURNING 1
)
SELECT head.size, head.root, (SELECT count(*) FROM ins) FROM head`

// AddCheckpoint stores the signed note of pollID's tree at size with root.
// The head must have reached size (and, at exactly that size, have that
// root): a checkpoint of a tree the log does not hold is refused
// (ErrInvalid). Storing the same checkpoint twice is fine, as when two
// projectors sign the same head; a different root at a stored size is an
// error, since it would show two trees of one size.
func (s *Store) AddCheckpoint(ctx context.Context, pollID string, size int64, root tlog.Hash, note string) error {
	what := fmt.Sprintf("add checkpoint of poll %s at size %d", pollID, size)
	var (
		headSize int64
		headRoot []byte
		inserted int64
	)
	err := s.pool.QueryRow(ctx, addCheckpointSQL, pollID, size, root[:], note).Scan(&headSize, &headRoot, &inserted)
	if err != nil {
		return interpretError(what, err)
	}
	switch {
	case inserted == 1:
		return nil
	case headSize < size:
		return fmt.Errorf("%s: %w: the log holds only %d leaves", what, ErrInvalid, headSize)
	case headSize == size && tlog.Hash(headRoot) != root:
		return fmt.Errorf("%s: %w: the log's root at that size is %s, not %s", what, ErrInvalid, tlog.Hash(headRoot), root)
	}
	// A checkpoint of this size exists already: fine when it has this root.
	var stored []byte
	err = s.pool.QueryRow(ctx, `SELECT root FROM poll_log_checkpoints WHERE poll_id = $1 AND size = $2`, pollID, size).Scan(&stored)
	if err != nil {
		return interpretError(what, err)
	}
	if tlog.Hash(stored) != root {
		return fmt.Errorf("%s: %w: the checkpoint stored at that size has root %s, not %s", what, ErrInvalid, tlog.Hash(stored), root)
	}
	return nil
}

const checkpointsSQL = `
SELECT poll_id, size, root, checkpoint, signed_at FROM poll_log_checkpoints
WHERE $1::text IS NULL OR poll_id = $1 ORDER BY poll_id, size`

const latestCheckpointSQL = `
SELECT poll_id, size, root, checkpoint, signed_at FROM poll_log_checkpoints
WHERE poll_id = $1 ORDER BY size DESC LIMIT 1`

// LatestCheckpoint returns pollID's checkpoint of the largest size:
// ErrNotFound when the poll has none (or does not exist).
func (s *Store) LatestCheckpoint(ctx context.Context, pollID string) (Checkpoint, error) {
	what := "read the latest checkpoint of poll " + pollID
	rows, err := s.pool.Query(ctx, latestCheckpointSQL, pollID)
	if err != nil {
		return Checkpoint{}, interpretError(what, err)
	}
	var c Checkpoint
	found := false
	err = scanCheckpoints(rows, &c, func() error { found = true; return nil })
	if err != nil {
		return Checkpoint{}, interpretError(what, err)
	}
	if !found {
		return Checkpoint{}, fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	return c, nil
}

// Checkpoints calls fn for every stored checkpoint (one poll's when pollID
// is not empty) in (poll, size) order, from one snapshot. It streams:
// memory does not grow with the checkpoints. Read before an Export, the
// checkpoints all fall within the exported rows, since a checkpoint is
// stored only for a size its poll's rows had reached.
func (s *Store) Checkpoints(ctx context.Context, pollID string, fn func(Checkpoint) error) error {
	p := optional(pollID)
	rows, err := s.pool.Query(ctx, checkpointsSQL, p)
	if err != nil {
		return interpretError("read checkpoints", err)
	}
	var c Checkpoint
	return interpretError("read checkpoints", scanCheckpoints(rows, &c, func() error { return fn(c) }))
}

// scanCheckpoints scans each row of rows into *c and calls fn.
func scanCheckpoints(rows pgx.Rows, c *Checkpoint, fn func() error) error {
	var root []byte
	_, err := pgx.ForEachRow(rows, []any{&c.PollID, &c.Size, &root, &c.Note, &c.SignedAt}, func() error {
		if len(root) != hashSize {
			return errors.New("poll " + c.PollID + ": checkpoint root of the wrong length")
		}
		c.Root = tlog.Hash(root)
		return fn()
	})
	return err
}
