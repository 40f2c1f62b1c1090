package audit

import (
	"fmt"

	"golang.org/x/mod/sumdb/tlog"
)

// Tree is one poll's log held in memory: every hash tlog stores for the
// leaves appended so far, in tlog's stored-hash order (about two per
// leaf: 64 bytes a leaf, 64 MB for a million). From them it answers the
// root at any earlier size and the inclusion and consistency proofs, as
// the database's log does, so it serves as the reference for the audit of
// an export and for tests. The zero Tree is empty and ready to use; a Tree
// is not safe for concurrent appends.
type Tree struct {
	blocks [][]tlog.Hash // the stored hashes, blockSize to a block, so growing never copies them
	stored int64         // stored hashes
	size   int64
}

// blockSize is the number of hashes in one block of a Tree (2 MB).
const blockSize = 1 << 16

// Size is the number of leaves appended.
func (t *Tree) Size() int64 { return t.size }

// Append adds the leaf with hash leaf (LeafHash of the row) at index Size.
func (t *Tree) Append(leaf tlog.Hash) error {
	hs, err := tlog.StoredHashesForRecordHash(t.size, leaf, t)
	if err != nil {
		return fmt.Errorf("append leaf %d: %w", t.size, err)
	}
	for _, h := range hs {
		if t.stored%blockSize == 0 {
			t.blocks = append(t.blocks, make([]tlog.Hash, 0, blockSize))
		}
		last := len(t.blocks) - 1
		t.blocks[last] = append(t.blocks[last], h)
		t.stored++
	}
	t.size++
	return nil
}

// AppendLeaf adds l: its hash, at index Size.
func (t *Tree) AppendLeaf(l Leaf) error {
	h, err := LeafHash(l)
	if err != nil {
		return fmt.Errorf("leaf %d: %w", t.size, err)
	}
	return t.Append(h)
}

// LeafHash is the hash of the leaf at index.
func (t *Tree) LeafHash(index int64) (tlog.Hash, error) {
	if index < 0 || index >= t.size {
		return tlog.Hash{}, fmt.Errorf("leaf index %d is not in a tree of size %d", index, t.size)
	}
	return t.hash(tlog.StoredHashIndex(0, index)), nil
}

// Root is the RFC 6962 root of the first size leaves (size 0: the hash of
// nothing).
func (t *Tree) Root(size int64) (tlog.Hash, error) {
	if err := t.checkSize(size); err != nil {
		return tlog.Hash{}, err
	}
	return tlog.TreeHash(size, t)
}

// InclusionProof proves the leaf at index to be in the tree of the first
// size leaves.
func (t *Tree) InclusionProof(index, size int64) (tlog.RecordProof, error) {
	if err := t.checkSize(size); err != nil {
		return nil, err
	}
	if index < 0 || index >= size {
		return nil, fmt.Errorf("leaf index %d is not in a tree of size %d", index, size)
	}
	return tlog.ProveRecord(size, index, t)
}

// ConsistencyProof proves the tree of the first oldSize leaves to be a
// prefix of the tree of the first newSize. It is empty when oldSize is 0
// or equals newSize.
func (t *Tree) ConsistencyProof(oldSize, newSize int64) (tlog.TreeProof, error) {
	if err := t.checkSize(newSize); err != nil {
		return nil, err
	}
	if oldSize < 0 || oldSize > newSize {
		return nil, fmt.Errorf("no consistency proof from size %d to size %d: the older size must be 0 to %d", oldSize, newSize, newSize)
	}
	if oldSize == 0 {
		return tlog.TreeProof{}, nil
	}
	return tlog.ProveTree(newSize, oldSize, t)
}

// ReadHashes is tlog.HashReader over the stored hashes.
func (t *Tree) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		if x < 0 || x >= t.stored {
			return nil, fmt.Errorf("stored hash %d is not in a tree of size %d", x, t.size)
		}
		out[i] = t.hash(x)
	}
	return out, nil
}

func (t *Tree) hash(stored int64) tlog.Hash { return t.blocks[stored/blockSize][stored%blockSize] }

func (t *Tree) checkSize(size int64) error {
	if size < 0 || size > t.size {
		return fmt.Errorf("size %d: the tree holds %d leaves", size, t.size)
	}
	return nil
}
