package ledger

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/tlog"
)

// This file answers proofs from a poll's stored log: inclusion of a leaf in
// a tree of some size, and consistency between two sizes. The hashes come
// from the tiles through tlog.TileHashReader, which checks every tile it
// reads against the head's root before it uses a hash from it, so a proof
// answered is one of the tree the head names.

// Inclusion is a proof that a leaf is in its poll's tree of TreeSize
// leaves, whose root is Root.
type Inclusion struct {
	PollID   string
	Leaf     int64
	TreeSize int64
	Root     tlog.Hash
	Proof    tlog.RecordProof
}

// Consistency is a proof that a poll's tree of From leaves is a prefix of
// its tree of To leaves.
type Consistency struct {
	PollID   string
	From, To int64
	FromRoot tlog.Hash
	ToRoot   tlog.Hash
	Proof    tlog.TreeProof
}

// ErrBadProofRequest: the sizes or the leaf asked for are outside the tree.
var ErrBadProofRequest = fmt.Errorf("%w: the sizes or the leaf are outside the tree", ErrInvalid)

// InclusionProof proves leaf's place in pollID's tree of treeSize leaves (0:
// the current size), from one snapshot.
func (s *Store) InclusionProof(ctx context.Context, pollID string, leaf, treeSize int64) (Inclusion, error) {
	in := Inclusion{PollID: pollID, Leaf: leaf}
	err := s.withLog(ctx, pollID, func(size int64, hr tlog.HashReader) error {
		if treeSize == 0 {
			treeSize = size
		}
		if leaf < 0 || leaf >= treeSize || treeSize > size {
			return fmt.Errorf("leaf %d of a tree of %d (the log holds %d): %w", leaf, treeSize, size, ErrBadProofRequest)
		}
		var err error
		in.TreeSize = treeSize
		if in.Root, err = tlog.TreeHash(treeSize, hr); err != nil {
			return err
		}
		in.Proof, err = tlog.ProveRecord(treeSize, leaf, hr)
		return err
	})
	return in, err
}

// ConsistencyProof proves pollID's tree of from leaves a prefix of its tree
// of to leaves (0: the current size), from one snapshot.
func (s *Store) ConsistencyProof(ctx context.Context, pollID string, from, to int64) (Consistency, error) {
	c := Consistency{PollID: pollID, From: from}
	err := s.withLog(ctx, pollID, func(size int64, hr tlog.HashReader) error {
		if to == 0 {
			to = size
		}
		if from < 1 || from > to || to > size {
			return fmt.Errorf("from %d to %d (the log holds %d): %w", from, to, size, ErrBadProofRequest)
		}
		var err error
		c.To = to
		if c.FromRoot, err = tlog.TreeHash(from, hr); err != nil {
			return err
		}
		if c.ToRoot, err = tlog.TreeHash(to, hr); err != nil {
			return err
		}
		c.Proof, err = tlog.ProveTree(to, from, hr)
		return err
	})
	return c, err
}

// withLog runs fn with a reader of pollID's stored hashes, checked against
// its head, in a read-only snapshot.
func (s *Store) withLog(ctx context.Context, pollID string, fn func(size int64, hr tlog.HashReader) error) error {
	what := "prove from the log of poll " + pollID
	return s.runTx(ctx, what, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var size int64
		var root, partial []byte
		err := tx.QueryRow(ctx, `SELECT size, root, partial FROM poll_log_heads WHERE poll_id = $1`, pollID).Scan(&size, &root, &partial)
		if err != nil {
			return interpretError(what, err)
		}
		h, err := headFromRow(size, root, partial)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if !h.built {
			return fmt.Errorf("%s: the log is still to build: run tally migrate up", what)
		}
		tr := &tileReader{ctx: ctx, tx: tx, poll: pollID, head: h.state}
		if err := fn(size, tlog.TileHashReader(tlog.Tree{N: size, Hash: h.state.root}, tr)); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	})
}

// tileReader reads a poll's tiles for tlog.TileHashReader: a partial tile
// from the head, when it is the head's partial tile of its level or a
// prefix of it; any other tile is a prefix of a full tile in
// poll_log_tiles (a partial tile of an earlier size is a prefix of the
// tile of the same place now).
type tileReader struct {
	ctx  context.Context
	tx   pgx.Tx
	poll string
	head logState
}

func (r *tileReader) Height() int { return tileHeight }

func (r *tileReader) SaveTiles([]tlog.Tile, [][]byte) {}

func (r *tileReader) ReadTiles(tiles []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(tiles))
	var levels []int16
	var idxs []int64
	var need []int
	for i, t := range tiles {
		if t.L < len(r.head.partial) && t.N == r.head.size>>(tileHeight*t.L)>>tileHeight && t.W*hashSize <= len(r.head.partial[t.L]) {
			out[i] = r.head.partial[t.L][:t.W*hashSize]
			continue
		}
		levels, idxs, need = append(levels, int16(t.L)), append(idxs, t.N), append(need, i)
	}
	if len(need) == 0 {
		return out, nil
	}
	rows, err := r.tx.Query(r.ctx, `
SELECT t.level, t.idx, t.hashes FROM poll_log_tiles t
JOIN unnest($2::smallint[], $3::bigint[]) AS w(level, idx) ON t.level = w.level AND t.idx = w.idx
WHERE t.poll_id = $1`, r.poll, levels, idxs)
	if err != nil {
		return nil, err
	}
	full := map[[2]int64][]byte{}
	var level int16
	var idx int64
	var data []byte
	if _, err := pgx.ForEachRow(rows, []any{&level, &idx, &data}, func() error {
		full[[2]int64{int64(level), idx}] = append([]byte(nil), data...)
		return nil
	}); err != nil {
		return nil, err
	}
	for _, i := range need {
		t := tiles[i]
		data := full[[2]int64{int64(t.L), t.N}]
		if len(data) < t.W*hashSize {
			return nil, fmt.Errorf("tile %s of the log is missing", t.Path())
		}
		out[i] = data[:t.W*hashSize]
	}
	return out, nil
}
