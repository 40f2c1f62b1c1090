package ledger_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"tally/audit"
	"tally/ledger"
)

// Proofs answered from the stored tiles, for any leaf and any size up to
// the head, are the proofs of the tree an export hashes to, and check.
func TestProofsFromStoredLog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll(t, "p", "a", "b")
	b.poll(t, "q", "a")
	n := 0
	for _, k := range []int{1, 255, 300, 70, 1, 600} {
		batch := make([]ledger.Event, k)
		for j := range batch {
			batch[j] = ev(fmt.Sprintf("u%d", n), "k", "p", []string{"a", "b"}[j%2])
			n++
		}
		batch = append(batch, ev(fmt.Sprintf("v%d", n), "k", "q", "a"))
		if _, err := b.store.Append(b.ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	var ref audit.Tree
	if err := b.store.Export(b.ctx, "p", func(r ledger.LedgerRow) error {
		h, err := r.LeafHash()
		if err != nil {
			return err
		}
		return ref.Append(h)
	}); err != nil {
		t.Fatal(err)
	}
	n++ // the poll's definition, leaf 0
	if ref.Size() != int64(n) {
		t.Fatalf("export holds %d leaves of p, want %d", ref.Size(), n)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for range 60 {
		size := 1 + rng.Int64N(int64(n))
		if rng.IntN(4) == 0 {
			size = int64(n)
		}
		leaf := rng.Int64N(size)
		in, err := b.store.InclusionProof(b.ctx, "p", leaf, size)
		if err != nil {
			t.Fatalf("leaf %d of %d: %v", leaf, size, err)
		}
		want, _ := ref.InclusionProof(leaf, size)
		root, _ := ref.Root(size)
		lh, _ := ref.LeafHash(leaf)
		if in.Root != root || !slices.Equal(in.Proof, want) {
			t.Fatalf("leaf %d of %d: the stored log's proof differs from the export's tree", leaf, size)
		}
		if err := audit.CheckInclusion("p", leaf, lh, size, in.Root, in.Proof); err != nil {
			t.Fatalf("leaf %d of %d: %v", leaf, size, err)
		}
		from := 1 + rng.Int64N(size)
		c, err := b.store.ConsistencyProof(b.ctx, "p", from, size)
		if err != nil {
			t.Fatalf("consistency %d..%d: %v", from, size, err)
		}
		wantC, _ := ref.ConsistencyProof(from, size)
		fromRoot, _ := ref.Root(from)
		if c.FromRoot != fromRoot || c.ToRoot != root || !slices.Equal(c.Proof, wantC) {
			t.Fatalf("consistency %d..%d differs from the export's tree", from, size)
		}
		if err := audit.CheckConsistency("p", from, c.FromRoot, size, c.ToRoot, c.Proof); err != nil {
			t.Fatalf("consistency %d..%d: %v", from, size, err)
		}
	}
	for _, bad := range [][2]int64{{-1, 0}, {int64(n), 0}, {0, int64(n) + 1}, {5, 3}} {
		if _, err := b.store.InclusionProof(b.ctx, "p", bad[0], bad[1]); !errors.Is(err, ledger.ErrBadProofRequest) {
			t.Errorf("inclusion of leaf %d in %d: %v, want ErrBadProofRequest", bad[0], bad[1], err)
		}
	}
	if _, err := b.store.ConsistencyProof(b.ctx, "p", 0, 5); !errors.Is(err, ledger.ErrBadProofRequest) {
		t.Errorf("consistency from 0: %v, want ErrBadProofRequest", err)
	}
	if _, err := b.store.InclusionProof(b.ctx, "nopoll", 0, 0); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("proof in an unknown poll: %v, want ErrNotFound", err)
	}
}

// A stored tile changed by someone holding the database makes proofs
// fail rather than answer hashes the head's root does not cover.
func TestProofsRefuseATamperedTile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll(t, "p", "a")
	batch := make([]ledger.Event, 600)
	for j := range batch {
		batch[j] = ev(fmt.Sprintf("u%d", j), "k", "p", "a")
	}
	if _, err := b.store.Append(b.ctx, batch); err != nil {
		t.Fatal(err)
	}
	// 255 - b differs from b for every byte b: the change is never a no-op.
	tamper(t, b, `UPDATE poll_log_tiles SET hashes = set_byte(hashes, 0, 255 - get_byte(hashes, 0)) WHERE poll_id = 'p' AND level = 0 AND idx = 0`)
	if _, err := b.store.InclusionProof(b.ctx, "p", 3, 0); err == nil {
		t.Fatal("a proof from a tampered tile was answered")
	}
}
