package audit_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"tally/audit"
)

// testLeaf is the i-th leaf of a test poll: four candidates in turn.
func testLeaf(poll string, i int) audit.Leaf {
	return audit.Leaf{PollID: poll, CandidateID: fmt.Sprintf("c%d", i%4), PrincipalID: fmt.Sprintf("p-%d", i),
		ClientEventID: fmt.Sprintf("e-%d", i), ReceivedAt: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Millisecond)}
}

// testTree is a tree of n test leaves of poll p.
func testTree(t testing.TB, poll string, n int) *audit.Tree {
	t.Helper()
	tr, err := buildTree(poll, n)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func buildTree(poll string, n int) (*audit.Tree, error) {
	var tr audit.Tree
	for i := range n {
		if err := tr.AppendLeaf(testLeaf(poll, i)); err != nil {
			return nil, err
		}
	}
	return &tr, nil
}

// mustTree is buildTree for a package-level fixture.
func mustTree(poll string, n int) *audit.Tree {
	tr, err := buildTree(poll, n)
	if err != nil {
		panic(err)
	}
	return tr
}

// The tree agrees with tlog's own root and proofs at every size and index
// of a small tree, including the empty tree.
func TestTreeAgreesWithTlog(t *testing.T) {
	const n = 70
	tr := testTree(t, "p", n)
	for size := int64(0); size <= n; size++ {
		root, err := tr.Root(size)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := tlog.TreeHash(size, tr)
		if root != want {
			t.Fatalf("root at %d differs from tlog's", size)
		}
		for i := int64(0); i < size; i++ {
			p, err := tr.InclusionProof(i, size)
			if err != nil {
				t.Fatal(err)
			}
			leaf, _ := tr.LeafHash(i)
			if err := audit.CheckInclusion("p", i, leaf, size, root, p); err != nil {
				t.Fatalf("leaf %d of %d: %v", i, size, err)
			}
		}
		for old := int64(0); old <= size; old++ {
			p, err := tr.ConsistencyProof(old, size)
			if err != nil {
				t.Fatal(err)
			}
			oldRoot, _ := tr.Root(old)
			if err := audit.CheckConsistency("p", old, oldRoot, size, root, p); err != nil {
				t.Fatalf("%d to %d: %v", old, size, err)
			}
		}
	}
	if _, err := tr.Root(n + 1); err == nil {
		t.Error("root past the tree's size answered")
	}
	if _, err := tr.InclusionProof(n, n); err == nil || !strings.Contains(err.Error(), "leaf index 70 is not in a tree of size 70") {
		t.Errorf("inclusion proof of the leaf at the size: error %v, want one saying it is not in the tree", err)
	}
	if _, err := tr.LeafHash(n); err == nil {
		t.Error("the hash of the leaf at the size answered")
	}
	stored := tlog.StoredHashCount(n)
	if _, err := tr.ReadHashes([]int64{stored - 1}); err != nil {
		t.Errorf("the last stored hash: %v", err)
	}
	if _, err := tr.ReadHashes([]int64{stored}); err == nil {
		t.Error("a stored hash past the last answered")
	}
	if _, err := tr.ConsistencyProof(5, 4); err == nil {
		t.Error("consistency proof from a larger size answered")
	}
}

// A tree whose stored hashes fill more than one of its blocks agrees with
// tlog's own, kept in a map: its root, and the proofs of leaves on either
// side of the blocks' boundary.
func TestTreeAcrossBlocks(t *testing.T) {
	const n = 40_000 // about 80,000 stored hashes, past the first block of 65,536
	var tr audit.Tree
	store := mapHashes{}
	for i := range int64(n) {
		data := []byte(strconv.FormatInt(i, 10))
		if err := tr.Append(tlog.RecordHash(data)); err != nil {
			t.Fatal(err)
		}
		hs, err := tlog.StoredHashes(i, data, store)
		if err != nil {
			t.Fatal(err)
		}
		for j, h := range hs {
			store[tlog.StoredHashIndex(0, i)+int64(j)] = h
		}
	}
	want, err := tlog.TreeHash(n, store)
	if err != nil {
		t.Fatal(err)
	}
	root, err := tr.Root(n)
	if err != nil || root != want {
		t.Fatalf("root of %d leaves: %v, %v; tlog's is %v", n, root, err, want)
	}
	for _, i := range []int64{0, 32_767, 32_768, 32_769, n - 1} {
		leaf, _ := tr.LeafHash(i)
		p, err := tr.InclusionProof(i, n)
		if err != nil {
			t.Fatal(err)
		}
		if err := audit.CheckInclusion("p", i, leaf, n, want, p); err != nil {
			t.Errorf("leaf %d: %v", i, err)
		}
	}
}

// mapHashes is a tlog.HashReader over stored hashes kept in a map.
type mapHashes map[int64]tlog.Hash

func (m mapHashes) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		h, ok := m[x]
		if !ok {
			return nil, fmt.Errorf("no stored hash %d", x)
		}
		out[i] = h
	}
	return out, nil
}

// The empty tree's root is SHA-256 of nothing (RFC 6962 2.1).
func TestTreeEmptyRoot(t *testing.T) {
	var tr audit.Tree
	root, err := tr.Root(0)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%x", root[:]); got != "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Fatalf("empty root %s", got)
	}
}

// BenchmarkTreeBuild1M builds a poll's tree of a million leaves from their
// rows (leaf encoding and hashing included) and takes its root. With
// -short (make test runs every benchmark once, under -race) the tree has
// 16,384 leaves.
func BenchmarkTreeBuild1M(b *testing.B) {
	n := 1 << 20
	if testing.Short() {
		n = 1 << 14
	}
	leaves := make([]audit.Leaf, n)
	for i := range leaves {
		leaves[i] = testLeaf("bench", i)
	}
	b.ResetTimer()
	for b.Loop() {
		var tr audit.Tree
		for _, l := range leaves {
			if err := tr.AppendLeaf(l); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := tr.Root(int64(n)); err != nil {
			b.Fatal(err)
		}
	}
}
