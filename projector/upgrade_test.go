package projector_test

import (
	"testing"
	"time"
)

// Entries intake wrote before the single-field encoding (version 1) are
// applied after an upgrade, beside the new ones, with the same outcomes:
// a stream need not be drained before upgrading.
func TestVersion1EntriesApplied(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll("lunch", "pizza", "sushi")
	for _, e := range votes("old", 10, "lunch", "pizza", "sushi") {
		b.enqueueRaw(0, legacy(e, e.Answer())...)
		b.mu.Lock()
		b.sent = append(b.sent, e) // checkInvariants holds them to the same rules
		b.mu.Unlock()
	}
	// A version 1 entry and a new one of the same key: the second is a
	// duplicate whatever the encoding.
	first := ballot("twice", "k1", "lunch", "pizza")
	b.enqueueRaw(0, legacy(first, first.Answer())...)
	b.enqueue(first)
	b.mu.Lock()
	b.sent = append(b.sent, first)
	b.mu.Unlock()
	b.enqueue(votes("new", 10, "lunch", "pizza", "sushi")...)
	r := b.start(b.store, fast("p1"))
	b.waitDrained(20 * time.Second)
	r.stop()
	if got := sum(b.tallies("lunch")); got != 21 {
		t.Errorf("total votes %d, want 21: 10 of version 1, 10 new and one of a key sent in both", got)
	}
	if ds := b.deadLetters(); len(ds) != 0 {
		t.Errorf("%d entries dead-lettered, want none: first %+v", len(ds), ds[0])
	}
}
