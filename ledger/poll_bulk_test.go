package ledger_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"tally/ledger"
	"tally/vote"
)

// TestEnsurePolls: many polls in one call get, each, the answer
// EnsurePoll gives it alone (made; there with this definition; there with
// another, naming the field; refused, naming the field), in the order
// asked; a poll made in bulk is the poll CreatePoll makes: its definition
// leaf verifies against its rows, its votes count, its catalog change and
// admin action are written.
func TestEnsurePolls(t *testing.T) {
	t.Parallel()
	b := setup(t)
	closes := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	ranked, err := vote.NewRules(vote.Spec{Kind: "ranked"}, 3)
	if err != nil {
		t.Fatal(err)
	}
	old := ledger.Poll{ID: "old", Title: "Old", Choices: []string{"x"}}
	if err := b.store.CreatePoll(b.ctx, old); err != nil {
		t.Fatal(err)
	}
	a := ledger.Poll{ID: "a", Title: "A", Choices: []string{"x", "y"}, ClosesAt: &closes, PublicResults: true}
	r := ledger.Poll{ID: "r", Title: "R", Choices: []string{"x", "y", "z"}, Rules: ranked, Eligible: []string{"p-2", "p-1", "p-2"}}
	aOther := a
	aOther.Title = "Another"
	oldOther := old
	oldOther.Choices = []string{"x", "z"}
	ps := []ledger.Poll{a, r, {ID: "bad", Title: "No choices"}, old, oldOther, aOther, r}
	got, err := b.store.EnsurePolls(b.ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"created", "created", "invalid choices", "exists", "conflict choices", "conflict title", "exists"}
	for i, o := range got {
		var s string
		var fe *ledger.FieldError
		var dc *ledger.DefinitionConflict
		switch {
		case o.Created && o.Err == nil:
			s = "created"
		case o.Err == nil:
			s = "exists"
		case errors.As(o.Err, &fe):
			s = "invalid " + fe.Field
		case errors.As(o.Err, &dc):
			s = "conflict " + dc.Field
		default:
			s = fmt.Sprint(o.Err)
		}
		if s != want[i] {
			t.Errorf("poll %d (%s): %s, want %s", i, ps[i].ID, s, want[i])
		}
	}
	for _, p := range []ledger.Poll{a, r} {
		stored, err := b.store.Poll(b.ctx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		if stored.Title != p.Title || len(stored.Choices) != len(p.Choices) || stored.BallotRules() != p.BallotRules() ||
			stored.PublicResults != p.PublicResults || (p.ClosesAt != nil) != (stored.ClosesAt != nil) {
			t.Errorf("poll %s stored as %+v", p.ID, stored)
		}
	}
	if st, _ := b.store.Poll(b.ctx, "r"); len(st.Eligible) != 2 || st.Eligibility != ledger.EligibleList {
		t.Errorf("poll r's list %v (%s), want p-1, p-2", st.Eligible, st.Eligibility)
	}
	out, err := b.store.Append(b.ctx, []ledger.Event{ev("p-9", "k1", "a", "y")})
	if err != nil || out[0].Status != ledger.StatusRecorded {
		t.Fatalf("a vote on a poll made in bulk: %v %v", out, err)
	}
	rep, err := b.store.Rebuild(b.ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if rep.LogProblems != 0 || rep.Differing != 0 {
		t.Fatalf("rebuild of polls made in bulk: %d log problems, %d differing rows: %+v", rep.LogProblems, rep.Differing, rep.Logs)
	}
	changes, err := b.store.CatalogChangesAfter(b.ctx, 1, 100) // after old's
	if err != nil || len(changes.Changes) != 2 {
		t.Fatalf("catalog changes %+v (%v), want a and r", changes.Changes, err)
	}
	if n := len(actions(t, b)); n != 3 {
		t.Fatalf("%d admin actions, want 3 (old, a, r)", n)
	}
	if _, err := b.store.EnsurePolls(b.ctx, nil); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("no polls: %v, want ErrInvalid", err)
	}
}

// TestEnsurePollsRate creates 2,000 polls in batches of 1,000 and reports
// the rate (go test -v shows it).
func TestEnsurePollsRate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n, batch = 2000, 1000
	start := time.Now()
	for k := 0; k < n; k += batch {
		ps := make([]ledger.Poll, batch)
		for i := range ps {
			ps[i] = ledger.Poll{ID: fmt.Sprintf("q%d", k+i), Title: "Lunch?", Choices: []string{"pizza", "sushi", "tacos"}}
		}
		out, err := b.store.EnsurePolls(b.ctx, ps)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range out {
			if !o.Created {
				t.Fatalf("poll %d: %+v", i, o)
			}
		}
	}
	t.Logf("%d polls in batches of %d: %.0f polls/s", n, batch, n/time.Since(start).Seconds())
}
