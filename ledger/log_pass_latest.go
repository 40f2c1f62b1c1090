package ledger

import (
	"strings"
	"sync/atomic"
)

// This file owns what the pass's hasher (log_pass_hash.go) learns of a
// poll of answers latest as it hashes the poll's rows in leaf order: each
// principal's last answer in the log, the ballot that counts (docs/audit.md,
// "Which votes count"). The rebuild then needs no second read of the
// poll's rows to find them (latestSQL, which Repair still uses, joins
// every leaf with its row and sorts them); a poll the pass does not hash
// whole, or one whose principals do not fit in maxLastHeld, is left to it.

// maxLastHeld bounds the principals whose last answers the hashers of one
// pass keep, all their polls together (36 bytes a principal of a
// 7-character id): a poll whose next principal finds it spent is read
// with latestSQL.
const maxLastHeld = 1 << 21

// lastAnswers are the principals' last answers in a poll's log so far.
type lastAnswers struct {
	// of is each principal's index in last, which holds the number of its
	// answer (≥ 0), or -1-i, others[i] being the answer (past
	// maxFingerprintsHeld, not numbered). A principal's key is set once:
	// an assignment to a string key of a map stores the key it is given,
	// which may be a view of a batch's text.
	of     map[string]int32
	last   []int32
	others []string
	room   *atomic.Int64 // principals the pass's polls may still keep, shared
	over   bool          // room ran out: of is dropped, its principals given back
}

// newLastAnswers keeps last answers while room, which the hashers of
// other polls may share, has room for their principals.
func newLastAnswers(room *atomic.Int64) *lastAnswers {
	return &lastAnswers{of: map[string]int32{}, room: room}
}

// note records that principal's answer is the next leaf's: its number,
// or answer itself when not numbered (answer < 0). principal may be a
// view of a batch's text: it is copied when kept.
func (la *lastAnswers) note(principal string, number int32, answer string) {
	if la.over {
		return
	}
	if number < 0 {
		la.others = append(la.others, answer)
		number = -int32(len(la.others))
	}
	if i, ok := la.of[principal]; ok {
		la.last[i] = number
		return
	}
	if la.room.Add(-1) < 0 {
		la.room.Add(int64(len(la.last)) + 1)
		la.over, la.of, la.last, la.others = true, nil, nil, nil
		return
	}
	la.of[strings.Clone(principal)] = int32(len(la.last))
	la.last = append(la.last, number)
}

// counts are the last answers counted by answer, answers being the
// poll's by number; nil when there were too many principals to keep.
func (la *lastAnswers) counts(answers []string) map[string]int64 {
	if la.over {
		return nil
	}
	out := map[string]int64{}
	for _, n := range la.last {
		if n >= 0 {
			out[answers[n]]++
		} else {
			out[la.others[-n-1]]++
		}
	}
	return out
}
