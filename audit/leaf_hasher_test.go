package audit_test

import (
	"strings"
	"testing"

	"tally/audit"
)

// A LeafHasher hashes as LeafHash does, and refuses what it refuses, a
// ballot it has seen before included: it remembers a ballot found
// canonical, not a leaf.
func TestLeafHasherIsLeafHash(t *testing.T) {
	ranked := exampleBallotLeaf
	ranked.Ballot = `["b","a"]`
	badPrincipal := exampleBallotLeaf
	badPrincipal.PrincipalID = "a b"
	badKey := exampleBallotLeaf
	badKey.ClientEventID = strings.Repeat("x", 65)
	noTime := exampleBallotLeaf
	noTime.ReceivedAt = audit.Leaf{}.ReceivedAt
	both := exampleBallotLeaf
	both.CandidateID = "a"
	notCanonical := exampleBallotLeaf
	notCanonical.Ballot = `["a", "b"]`
	var h audit.LeafHasher
	for round := range 2 {
		for _, l := range []audit.Leaf{exampleLeaf, exampleBallotLeaf, ranked, badPrincipal, badKey, noTime, both, notCanonical, exampleBallotLeaf} {
			want, wantErr := audit.LeafHash(l)
			got, err := h.Hash(l)
			if got != want || (err == nil) != (wantErr == nil) {
				t.Errorf("round %d, leaf %+v: Hash %x (%v), LeafHash %x (%v)", round, l, got, err, want, wantErr)
			}
		}
	}
}

// A LeafHasher allocates nothing once it has seen a leaf's ballot.
func TestLeafHasherAllocatesNothing(t *testing.T) {
	var h audit.LeafHasher
	if _, err := h.Hash(exampleBallotLeaf); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := h.Hash(exampleBallotLeaf); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Hash of a ballot seen before: %v allocations, want 0", n)
	}
}
