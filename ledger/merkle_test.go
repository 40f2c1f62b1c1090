package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"testing"

	"golang.org/x/mod/sumdb/tlog"
	"pgregory.net/rapid"
)

// memTree is the reference: every stored hash of every leaf in a map, as
// tlog's own documentation builds a tree.
type memTree map[int64]tlog.Hash

func (m memTree) ReadHashes(xs []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(xs))
	for i, x := range xs {
		out[i] = m[x]
	}
	return out, nil
}

func leafHashOf(i int) tlog.Hash {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(i))
	return tlog.RecordHash(b[:])
}

// A log grown by extend in runs of any length has, at every size, the
// root the reference computes, and its full and partial tiles hold the
// reference's hashes.
func TestExtendMatchesReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		runs := rapid.SliceOfN(rapid.IntRange(1, 700), 1, 8).Draw(t, "runs")
		ref := memTree{}
		s := emptyLog()
		if s.root != sha256.Sum256(nil) {
			t.Fatalf("empty root %x", s.root)
		}
		tiles := map[[2]int64][]byte{}
		n := 0
		for _, k := range runs {
			leaves := make([]tlog.Hash, k)
			for i := range leaves {
				leaves[i] = leafHashOf(n + i)
				stored, err := tlog.StoredHashesForRecordHash(int64(n+i), leaves[i], ref)
				if err != nil {
					t.Fatal(err)
				}
				for j, h := range stored {
					ref[tlog.StoredHashIndex(0, int64(n+i))+int64(j)] = h
				}
			}
			next, full, err := s.extend(leaves)
			if err != nil {
				t.Fatal(err)
			}
			n += k
			want, _ := tlog.TreeHash(int64(n), ref)
			if next.size != int64(n) || next.root != want {
				t.Fatalf("after %d leaves: size %d root %x, want %x", n, next.size, next.root, want)
			}
			for _, f := range full {
				tiles[[2]int64{int64(f.level), f.idx}] = f.data
				wantData, _ := tlog.ReadTileData(tlog.Tile{H: tileHeight, L: f.level, N: f.idx, W: tileWidth}, ref)
				if !bytes.Equal(f.data, wantData) {
					t.Fatalf("full tile %d/%d differs", f.level, f.idx)
				}
			}
			for level, p := range next.partial {
				w := partialWidth(int64(n), level)
				if w == 0 {
					continue
				}
				wantData, _ := tlog.ReadTileData(tlog.Tile{H: tileHeight, L: level, N: int64(n) >> (tileHeight * level) >> tileHeight, W: w}, ref)
				if !bytes.Equal(p, wantData) {
					t.Fatalf("partial tile of level %d differs at size %d", level, n)
				}
			}
			back, err := splitPartial(next.size, joinPartial(next.partial))
			if err != nil {
				t.Fatal(err)
			}
			next.partial = back
			s = next
		}
	})
}

func TestSplitPartialRefusesBadLengths(t *testing.T) {
	if _, err := splitPartial(3, make([]byte, 2*hashSize)); err == nil {
		t.Error("size 3 with 2 hashes of partial tiles: no error")
	}
	if _, err := splitPartial(3, make([]byte, 4*hashSize)); err == nil {
		t.Error("size 3 with 4 hashes of partial tiles: no error")
	}
	if _, err := splitPartial(256, make([]byte, hashSize)); err != nil {
		t.Errorf("size 256 with one hash (level 2): %v", err)
	}
}

// Past 65,536 leaves the log has five tile levels (of height 4); grown in
// uneven runs, its root is the reference's.
func TestExtendThreeLevels(t *testing.T) {
	ref := memTree{}
	s := emptyLog()
	n := 0
	for _, k := range []int{65535, 1, 300, 4000} {
		leaves := make([]tlog.Hash, k)
		for i := range leaves {
			leaves[i] = leafHashOf(n + i)
			stored, _ := tlog.StoredHashesForRecordHash(int64(n+i), leaves[i], ref)
			for j, h := range stored {
				ref[tlog.StoredHashIndex(0, int64(n+i))+int64(j)] = h
			}
		}
		var err error
		if s, _, err = s.extend(leaves); err != nil {
			t.Fatal(err)
		}
		n += k
		if want, _ := tlog.TreeHash(int64(n), ref); s.root != want {
			t.Fatalf("after %d leaves: root %x, want %x", n, s.root, want)
		}
	}
	if len(s.partial) != 5 {
		t.Fatalf("%d levels of partial tiles at size %d, want 5", len(s.partial), n)
	}
}
