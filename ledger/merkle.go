package ledger

import (
	"errors"
	"fmt"

	"golang.org/x/mod/sumdb/tlog"

	"tally/audit"
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
//
// It keeps the tree's frontier, the roots of the perfect subtrees that
// make it from the largest (leftmost) on, as RFC 6962's incremental
// builders do: a new leaf merges with the frontier's last root while they
// are of the same height, which makes every hash the tree stores (those
// tlog.StoredHashesForRecordHash gives, one node hash a leaf on average).
// Each hash of a tile level (tree level 4L) goes into that level's tile,
// which becomes a full tile at its 16th. The frontier at s.size is read
// from the partial tiles (they hold the tree's right edge).
func (s logState) extend(leaves []tlog.Hash) (logState, []fullTile, error) {
	if len(leaves) == 0 {
		return s, nil, nil
	}
	frontier, err := s.rightEdge()
	if err != nil {
		return logState{}, nil, err
	}
	tiles := make([][]byte, len(s.partial))
	for level, p := range s.partial {
		tiles[level] = append([]byte(nil), p...)
	}
	var full []fullTile
	// store adds a hash of tree level height, a level with tiles
	// (a multiple of tileHeight), the count-th of its level (from 1), to
	// its tile.
	store := func(height int, count int64, h tlog.Hash) {
		level := height / tileHeight
		for len(tiles) <= level {
			tiles = append(tiles, nil)
		}
		if tiles[level] == nil {
			tiles[level] = make([]byte, 0, tileWidth*hashSize) // one allocation a tile, not a slice grown five times
		}
		tiles[level] = append(tiles[level], h[:]...)
		if len(tiles[level]) == tileWidth*hashSize {
			full = append(full, fullTile{level: level, idx: count/tileWidth - 1, data: tiles[level]})
			tiles[level] = nil
		}
	}
	n := s.size
	for _, h := range leaves {
		n++
		store(0, n, h)
		cur, height := h, 0
		for len(frontier) > 0 && frontier[len(frontier)-1].height == height {
			cur = audit.NodeHash(frontier[len(frontier)-1].hash, cur) // the merge is most of what a leaf costs
			frontier = frontier[:len(frontier)-1]
			height++
			if height%tileHeight == 0 {
				store(height, n>>height, cur)
			}
		}
		frontier = append(frontier, edgeNode{height, cur})
	}
	next := logState{size: n, root: frontier[len(frontier)-1].hash}
	for i := len(frontier) - 2; i >= 0; i-- {
		next.root = audit.NodeHash(frontier[i].hash, next.root)
	}
	if next.partial, err = partialTiles(tiles, n); err != nil {
		return logState{}, nil, err
	}
	return next, full, nil
}

// edgeNode is a node on a log's right edge: the root of a perfect subtree
// of 2^height leaves.
type edgeNode struct {
	height int
	hash   tlog.Hash
}

// rightEdge gives the roots of the perfect subtrees that make up a log of
// s.size leaves, the highest first, read from s's partial tiles.
func (s logState) rightEdge() ([]edgeNode, error) {
	var frontier []edgeNode
	for h := 62; h >= 0; h-- {
		if s.size>>h&1 == 1 {
			x, err := s.hashFromPartial(tlog.StoredHashIndex(h, s.size>>h-1))
			if err != nil {
				return nil, fmt.Errorf("log: the right edge at size %d: %w", s.size, err)
			}
			frontier = append(frontier, edgeNode{h, x})
		}
	}
	return frontier, nil
}

// partialTiles gives the partial tile of each level of a log of n leaves
// from tiles, the hashes left over on each level once its full tiles were
// taken, and checks that each holds as many hashes as n says.
func partialTiles(tiles [][]byte, n int64) ([][]byte, error) {
	var partial [][]byte
	for level := 0; n>>(tileHeight*level) > 0; level++ {
		var p []byte
		if level < len(tiles) && len(tiles[level]) > 0 {
			p = tiles[level]
		}
		if len(p) != partialWidth(n, level)*hashSize {
			return nil, fmt.Errorf("log: the partial tile of level %d holds %d hashes at size %d", level, len(p)/hashSize, n)
		}
		partial = append(partial, p)
	}
	return partial, nil
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
