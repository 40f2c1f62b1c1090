package ledger_test

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"tally/ledger"
)

// TestCatalogChanges: each change of the catalog is one entry of the
// change log, written in the change's transaction: a poll created (with
// its choices and eligibility list: one entry), closed, a principal
// revoked, a key retired. What changed nothing writes nothing: a close of
// a closed poll, a poll created again as it is, a revocation or a
// retirement repeated, principals added unrevoked.
func TestCatalogChanges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var last int64
	want := func(step string, kind string, targets ...string) {
		t.Helper()
		got, err := b.store.CatalogChangesAfter(b.ctx, last, 100)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		var names []string
		for i, c := range got {
			if c.Seq <= last || i > 0 && c.Seq <= got[i-1].Seq {
				t.Fatalf("%s: seqs %v not increasing after %d", step, got, last)
			}
			if c.Kind != kind {
				t.Errorf("%s: change %+v, want kind %s", step, c, kind)
			}
			names = append(names, c.Target)
			last = c.Seq
		}
		slices.Sort(names)
		if !slices.Equal(names, targets) {
			t.Fatalf("%s: changes of %v, want %v", step, names, targets)
		}
	}
	p := ledger.Poll{ID: "p1", Title: "Lunch", Choices: []string{"a", "b"}, Eligible: []string{"e1", "e2"}}
	if err := b.store.CreatePoll(b.ctx, p); err != nil {
		t.Fatal(err)
	}
	want("create", ledger.ChangePoll, "p1")
	if created, err := b.store.EnsurePoll(b.ctx, p); err != nil || created {
		t.Fatalf("ensure: %v %v", created, err)
	}
	want("create again", ledger.ChangePoll)
	if err := b.store.ClosePoll(b.ctx, "p1", time.Now()); err != nil {
		t.Fatal(err)
	}
	want("close", ledger.ChangePoll, "p1")
	if err := b.store.ClosePoll(b.ctx, "p1", time.Now()); err != nil {
		t.Fatal(err)
	}
	want("close again", ledger.ChangePoll)

	ps, err := b.store.AddPrincipals(b.ctx, []string{"a", "b"}, "")
	if err != nil {
		t.Fatal(err)
	}
	want("add principals", ledger.ChangePrincipal)
	for range 2 {
		if err := b.store.RevokePrincipal(b.ctx, ps[1].ID); err != nil {
			t.Fatal(err)
		}
	}
	want("revoke twice", ledger.ChangePrincipal, ps[1].ID)
	if err := b.store.RevokePrincipal(b.ctx, "o-subject"); err != nil {
		t.Fatal(err)
	}
	want("revoke an OpenID Connect subject", ledger.ChangePrincipal, "o-subject")
	for range 2 {
		if err := b.store.RetireCredentialKey(b.ctx, "k-0011223344556677"); err != nil {
			t.Fatal(err)
		}
	}
	want("retire twice", ledger.ChangeKey, "k-0011223344556677")

	// What a cache reads again for the changes.
	polls, err := b.store.PollsOf(b.ctx, []string{"p1", "nope"})
	if err != nil || len(polls) != 1 || polls[0].ClosesAt == nil || !slices.Equal(polls[0].Eligible, []string{"e1", "e2"}) {
		t.Fatalf("PollsOf: %+v %v", polls, err)
	}
	rev, err := b.store.RevocationsOf(b.ctx, []string{ps[0].ID, ps[1].ID}, []string{"k-0011223344556677", "k-other"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rev.Principals[ps[1].ID]; !ok || len(rev.Principals) != 1 || len(rev.Keys) != 1 {
		t.Fatalf("RevocationsOf: %+v", rev)
	}
	if h, err := b.store.CatalogHorizon(b.ctx); err != nil || h != last {
		t.Fatalf("horizon %d (%v), want the last change %d", h, err, last)
	}
}

// TestCatalogChangesTrimmed: a reader that applied less than the log was
// trimmed to is told so, and the horizon stays past the trimmed changes;
// so is one that applied more than the log holds.
func TestCatalogChangesTrimmed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, id := range []string{"p1", "p2", "p3"} {
		b.poll(t, id, "a")
	}
	all, err := b.store.CatalogChangesAfter(b.ctx, 0, 10)
	if err != nil || len(all) != 3 {
		t.Fatalf("changes %v (%v), want 3", all, err)
	}
	if err := b.store.TrimCatalogChanges(b.ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.CatalogChangesAfter(b.ctx, all[0].Seq, 10); !errors.Is(err, ledger.ErrChangesTrimmed) {
		t.Fatalf("after a trimmed change: %v, want ErrChangesTrimmed", err)
	}
	if got, err := b.store.CatalogChangesAfter(b.ctx, all[1].Seq, 10); err != nil || len(got) != 1 || got[0] != all[2] {
		t.Fatalf("after the last trimmed change: %v %v, want %v", got, err, all[2:])
	}
	if err := b.store.TrimCatalogChanges(b.ctx, 0); err != nil {
		t.Fatal(err)
	}
	if h, err := b.store.CatalogHorizon(b.ctx); err != nil || h != all[2].Seq {
		t.Fatalf("horizon of an empty log %d (%v), want the last trimmed %d", h, err, all[2].Seq)
	}
	// A reader that applied more than the log holds (a database restored
	// from a backup) is told so.
	if _, err := b.store.CatalogChangesAfter(b.ctx, all[2].Seq+1, 10); !errors.Is(err, ledger.ErrChangesRewound) {
		t.Fatalf("after the log's end: %v, want ErrChangesRewound", err)
	}
	if got, err := b.store.CatalogChangesAfter(b.ctx, all[2].Seq, 10); err != nil || len(got) != 0 {
		t.Fatalf("at the log's end: %v %v, want nothing", got, err)
	}
}

// TestCatalogChangesInCommitOrder: changes made at once by many writers
// are numbered in the order they commit, so a reader that follows the log
// while they write, from the last seq it read, misses none.
func TestCatalogChangesInCommitOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const writers, each = 4, 15
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if err := b.store.CreatePoll(b.ctx, ledger.Poll{ID: "w" + string(rune('a'+w)) + "-" + string(rune('a'+i)), Title: "t", Choices: []string{"x"}}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	seen := map[string]bool{}
	var last int64
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		default:
		}
		got, err := b.store.CatalogChangesAfter(b.ctx, last, 7)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range got {
			seen[c.Target] = true
			last = c.Seq
		}
		if finished && len(got) > 0 {
			finished = false // read to the end
		}
	}
	if len(seen) != writers*each {
		t.Fatalf("the reader saw %d of %d polls created", len(seen), writers*each)
	}
}
