package audit

import (
	"golang.org/x/mod/sumdb/tlog"
)

// LeafHasher is LeafHash for the leaves of a log hashed one after
// another: it checks each distinct ballot once rather than once a leaf (a
// poll's ballots repeat, and reading a ballot is most of what encoding
// its leaf costs), and every id, time and candidate of every leaf as
// LeafHash does. The zero value is ready; it is not safe for concurrent
// use.
type LeafHasher struct {
	ballots map[string]struct{} // found canonical
	buf     []byte              // 0x00 and the last leaf hashed: one buffer for all
}

// maxBallotsChecked bounds the ballots a LeafHasher remembers: past it, a
// ballot not among them is checked each time, as LeafHash does.
const maxBallotsChecked = 4096

// Hash is LeafHash(l).
func (h *LeafHasher) Hash(l Leaf) (tlog.Hash, error) {
	var (
		b   []byte
		err error
	)
	if l.Ballot == "" || l.CandidateID != "" {
		b, err = EncodeLeaf(append(h.buf[:0], 0), l)
	} else {
		if _, ok := h.ballots[l.Ballot]; !ok {
			if err := checkLeafBallot(l.Ballot); err != nil {
				return tlog.Hash{}, err
			}
			if h.ballots == nil {
				h.ballots = map[string]struct{}{}
			}
			if len(h.ballots) < maxBallotsChecked {
				h.ballots[l.Ballot] = struct{}{}
			}
		}
		b, err = appendBallotLeaf(append(h.buf[:0], 0), l)
	}
	if err != nil {
		return tlog.Hash{}, err
	}
	h.buf = b
	return sum256(b), nil
}
