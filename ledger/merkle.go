package ledger

import (
	"errors"
	"fmt"

	"golang.org/x/mod/sumdb/tlog"
)

// This file owns the arithmetic of each poll's Merkle log (DESIGN.md I7,
// docs/audit.md): how a log's state grows by a run of leaf hashes. It
// reads and writes nothing; log_store.go keeps the state in PostgreSQL.
//
// A poll's log is an RFC 6962 tree over its ledger rows in leaf order. Its
// hashes are kept as golang.org/x/mod/sumdb/tlog keeps them, in tiles of
// height 4: a tile of level L holds up to 16 consecutive hashes of tree
// level 4L, and every other level is computed from them. (Height 4 keeps
// a head's partial tiles, at most 15 hashes a level, and a full tile
// within a table row: migration 00009 says why.) Full tiles are
// rows of poll_log_tiles, written once. The partial tile of each level
// (the hashes past its last full tile) lives in the poll's head with the
// tree's size and root, and is rewritten by each append. A partial tile of
// an earlier size is a prefix of the tile of the same place now, so one
// copy of each serves every size.

const (
	tileHeight = 4
	tileWidth  = 1 << tileHeight
	hashSize   = tlog.HashSize
)

// logState is a poll's log at one size: its root and its partial tiles.
type logState struct {
	size    int64
	root    tlog.Hash
	partial [][]byte // by level: the hashes of its partial tile, (size >> 4L) % 16 of them
}

// emptyLog is the log of a poll with no rows: its root is the SHA-256 of
// nothing (RFC 6962 2.1).
func emptyLog() logState {
	root, _ := tlog.TreeHash(0, nil)
	return logState{root: root}
}

// partialWidth is the width of level's partial tile in a tree of size n.
func partialWidth(n int64, level int) int {
	return int((n >> (tileHeight * level)) % tileWidth)
}

// splitPartial cuts a head's stored partial tiles into levels, by size.
func splitPartial(size int64, b []byte) ([][]byte, error) {
	var out [][]byte
	for level := 0; size>>(tileHeight*level) > 0; level++ {
		w := partialWidth(size, level) * hashSize
		if len(b) < w {
			return nil, fmt.Errorf("log head of size %d: partial tiles cut short at level %d", size, level)
		}
		out = append(out, b[:w:w])
		b = b[w:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("log head of size %d: %d bytes of partial tiles too many", size, len(b))
	}
	return out, nil
}

// joinPartial is splitPartial's inverse.
func joinPartial(levels [][]byte) []byte {
	out := []byte{} // never NULL: the column is NOT NULL
	for _, p := range levels {
		out = append(out, p...)
	}
	return out
}

// fullTile is a full tile to write: tileWidth hashes of tree level
// tileHeight*level.
type fullTile struct {
	level int
	idx   int64
	data  []byte
}

// errOutsideEdge: appending needed a hash that is not in the partial
// tiles. It cannot happen (everything an append reads lies on the tree's
// right edge, which the partial tiles hold); it is checked rather than
// assumed.
var errOutsideEdge = errors.New("log: a hash the append needs is not in the partial tiles")

// extend returns the state after appending the leaves whose hashes are
// leaves (leaf indexes s.size, s.size+1, ...) and the full tiles to write.
func (s logState) extend(leaves []tlog.Hash) (logState, []fullTile, error) {
	if len(leaves) == 0 {
		return s, nil, nil
	}
	// The hashes stored for leaves s.size.. are the stored indexes from
	// StoredHashIndex(0, s.size) on, contiguous and in order: a slice.
	base := tlog.StoredHashIndex(0, s.size)
	mem := &edgeReader{old: s, base: base,
		new: make([]tlog.Hash, 0, tlog.StoredHashIndex(0, s.size+int64(len(leaves)))-base)}
	for i, h := range leaves {
		n := s.size + int64(i)
		stored, err := tlog.StoredHashesForRecordHash(n, h, mem)
		if err != nil {
			return logState{}, nil, fmt.Errorf("log: hashes of leaf %d: %w", n, err)
		}
		mem.new = append(mem.new, stored...)
	}
	size := s.size + int64(len(leaves))
	next := logState{size: size}
	var full []fullTile
	for _, t := range tlog.NewTiles(tileHeight, s.size, size) {
		if t.W != tileWidth {
			continue // a partial tile: kept in the head, below
		}
		data, err := tlog.ReadTileData(t, mem)
		if err != nil {
			return logState{}, nil, fmt.Errorf("log: tile %s: %w", t.Path(), err)
		}
		full = append(full, fullTile{level: t.L, idx: t.N, data: data})
	}
	for level := 0; size>>(tileHeight*level) > 0; level++ {
		w := partialWidth(size, level)
		if w == 0 {
			next.partial = append(next.partial, nil)
			continue
		}
		t := tlog.Tile{H: tileHeight, L: level, N: size >> (tileHeight * level) >> tileHeight, W: w}
		data, err := tlog.ReadTileData(t, mem)
		if err != nil {
			return logState{}, nil, fmt.Errorf("log: tile %s: %w", t.Path(), err)
		}
		next.partial = append(next.partial, data)
	}
	root, err := tlog.TreeHash(size, mem)
	if err != nil {
		return logState{}, nil, fmt.Errorf("log: root of size %d: %w", size, err)
	}
	next.root = root
	return next, full, nil
}

// edgeReader reads the hashes an append needs: the new ones (stored
// indexes from base on) from new, the old ones from the old state's
// partial tiles.
type edgeReader struct {
	old  logState
	base int64
	new  []tlog.Hash
}

func (r *edgeReader) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		if x >= r.base {
			if x-r.base >= int64(len(r.new)) {
				return nil, fmt.Errorf("log: stored hash %d is not made yet", x)
			}
			out[i] = r.new[x-r.base]
			continue
		}
		h, err := r.old.hashFromPartial(x)
		if err != nil {
			return nil, err
		}
		out[i] = h
	}
	return out, nil
}

// hashFromPartial reads the stored hash x from the partial tiles, or
// answers errOutsideEdge.
func (s logState) hashFromPartial(x int64) (tlog.Hash, error) {
	t := tlog.TileForIndex(tileHeight, x)
	if t.L >= len(s.partial) || t.N != s.size>>(tileHeight*t.L)>>tileHeight || len(s.partial[t.L]) < t.W*hashSize {
		return tlog.Hash{}, errOutsideEdge
	}
	return tlog.HashFromTile(t, s.partial[t.L], x)
}
