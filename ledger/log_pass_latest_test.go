package ledger

import (
	"maps"
	"sync/atomic"
	"testing"
	"unsafe"
)

// TestLastAnswers: a principal's later answer replaces its earlier, the
// principal is copied from the text it is a view of (and a later view of
// it does not replace the copy), an answer not
// numbered counts by itself, and past the room its pass shares with other
// polls it keeps nothing and gives its room back.
func TestLastAnswers(t *testing.T) {
	answers := []string{"a", "b"}
	room := new(atomic.Int64)
	room.Store(3)
	la := newLastAnswers(room)
	text := []byte("u1u2")
	view := func(i int) string { return unsafe.String(&text[2*i], 2) } // of the batch's text
	la.note(view(0), 0, "")                                            // u1: a
	la.note("u2", 1, "")                                               // u2: b
	la.note(view(1), 1, "")                                            // u2: b again
	copy(text, "zzzz")                                                 // the batch's text, reused
	la.note("u1", -1, `["x"]`)                                         // u1: ["x"], not numbered
	la.note("u3", 0, "")                                               // u3: a
	la.note("u2", -1, `["y"]`)                                         // u2: ["y"]
	got := la.counts(answers)
	want := map[string]int64{"a": 1, `["x"]`: 1, `["y"]`: 1}
	if !maps.Equal(got, want) {
		t.Fatalf("counts %v, want %v", got, want)
	}
	other := newLastAnswers(room) // another poll's, sharing the room
	other.note("v1", 0, "")       // the room is spent
	if got := other.counts(answers); got != nil {
		t.Fatalf("the other poll, past the room: counts %v, want nil (left to latestSQL)", got)
	}
	la.note("u4", 1, "") // a fourth principal: past the room too
	if got := la.counts(answers); got != nil {
		t.Fatalf("past the room: counts %v, want nil (left to latestSQL)", got)
	}
	if n := room.Load(); n != 3 {
		t.Fatalf("room %d once both polls gave up theirs, want 3", n)
	}
}
