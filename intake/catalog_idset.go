package intake

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// idSet is a set of ids in two blocks of memory that hold no pointer: the
// ids sorted in byte order and packed end to end, and the end of each. An
// id costs its length and 4 bytes (a map of strings: about 67 bytes for an
// id of 26), and a list of any length is two objects the garbage
// collector does not scan. has is a binary search.
type idSet struct {
	packed string
	ends   []uint32 // ends[i] is the end of the i-th id in packed
}

// newIDSet is the set of ids (each once, whatever ids repeats); ids is not
// changed.
func newIDSet(ids []string) idSet {
	if len(ids) == 0 {
		return idSet{}
	}
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	size := 0
	for _, id := range sorted {
		size += len(id)
	}
	if size > math.MaxUint32 {
		// ledger.MaxEligible ids of vote.ValidID's length are far below it.
		panic(fmt.Sprintf("an id set of %d bytes is over the 4 GiB its offsets address", size))
	}
	var b strings.Builder
	b.Grow(size)
	ends := make([]uint32, len(sorted))
	for i, id := range sorted {
		b.WriteString(id)
		ends[i] = uint32(b.Len())
	}
	return idSet{packed: b.String(), ends: ends}
}

// len is the number of ids in the set.
func (s idSet) len() int { return len(s.ends) }

// at is the i-th id, in byte order.
func (s idSet) at(i int) string {
	start := uint32(0)
	if i > 0 {
		start = s.ends[i-1]
	}
	return s.packed[start:s.ends[i]]
}

// has reports whether id is in the set.
func (s idSet) has(id string) bool {
	lo, hi := 0, len(s.ends)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s.at(m) < id {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo < len(s.ends) && s.at(lo) == id
}
