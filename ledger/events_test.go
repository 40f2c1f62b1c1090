package ledger_test

import (
	"testing"

	"tally/ledger"
)

// TestEvents: one query answers many keys as Event answers each: the
// ledger row, else the rejection record; a key the ledger does not hold
// is absent, and so is another principal's use of the same client id.
func TestEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll(t, "lunch", "pizza", "sushi")
	b.poll(t, "dinner", "soup")
	out, err := b.store.Append(b.ctx, []ledger.Event{
		ev("alice", "k1", "lunch", "pizza"),
		ev("alice", "k2", "lunch", "sushi"), // already_responded
		ev("alice", "k1", "lunch", "sushi"), // key_reused, beside the row of k1
		ev("bob", "k9", "dinner", "soup"),
	})
	if err != nil {
		t.Fatal(err)
	}
	keys := []ledger.EventKey{
		{PrincipalID: "alice", ClientEventID: "k1"},
		{PrincipalID: "alice", ClientEventID: "k2"},
		{PrincipalID: "alice", ClientEventID: "k3"}, // never used
		{PrincipalID: "bob", ClientEventID: "k1"},   // alice's id, not bob's
		{PrincipalID: "alice", ClientEventID: "k9"}, // bob's id, not alice's
		{PrincipalID: "alice", ClientEventID: "k1"}, // asked twice
	}
	got, err := b.store.Events(b.ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("Events found %d keys, want 2 (alice's k1 and k2): %+v", len(got), got)
	}
	for _, k := range keys[:2] {
		one, err := b.store.Event(b.ctx, k.PrincipalID, k.ClientEventID)
		if err != nil {
			t.Fatal(err)
		}
		one.LeafIndex = -1 // Events does not look leaves up
		if got[k] != one {
			t.Errorf("Events[%v] = %+v, Event says %+v", k, got[k], one)
		}
	}
	if r := got[keys[0]]; r.Status != ledger.StatusRecorded || r.CandidateID != "pizza" || r.Seq != out[0].Seq {
		t.Errorf("alice k1: %+v, want the ledger row (recorded pizza, seq %d), not its key_reused rejection", r, out[0].Seq)
	}
	if r := got[keys[1]]; r.Status != ledger.StatusRejected || r.Reason != ledger.ReasonAlreadyResponded {
		t.Errorf("alice k2: %+v, want rejected already_responded", r)
	}

	none, err := b.store.Events(b.ctx, nil)
	if err != nil || len(none) != 0 {
		t.Fatalf("Events of no keys: %v, %v", none, err)
	}
}
