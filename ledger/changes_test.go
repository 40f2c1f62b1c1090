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
		u, err := b.store.CatalogChangesAfter(b.ctx, last, 100)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		got := u.Changes
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

	// What a cache reads again for the changes: the poll created and
	// closed once, as it is now.
	all, err := b.store.CatalogChangesAfter(b.ctx, 0, 100)
	if err != nil || len(all.Polls) != 1 || all.Polls[0].ClosesAt == nil || !slices.Equal(all.Polls[0].Eligible, []string{"e1", "e2"}) {
		t.Fatalf("the polls of the changes: %+v %v", all.Polls, err)
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
	u, err := b.store.CatalogChangesAfter(b.ctx, 0, 10)
	if err != nil || len(u.Changes) != 3 {
		t.Fatalf("changes %v (%v), want 3", u.Changes, err)
	}
	all := u.Changes
	if err := b.store.TrimCatalogChanges(b.ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.CatalogChangesAfter(b.ctx, all[0].Seq, 10); !errors.Is(err, ledger.ErrChangesTrimmed) {
		t.Fatalf("after a trimmed change: %v, want ErrChangesTrimmed", err)
	}
	if got, err := b.store.CatalogChangesAfter(b.ctx, all[1].Seq, 10); err != nil || len(got.Changes) != 1 || got.Changes[0] != all[2] ||
		len(got.Polls) != 1 || got.Polls[0].ID != all[2].Target {
		t.Fatalf("after the last trimmed change: %+v %v, want %v and its poll", got, err, all[2:])
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
	if got, err := b.store.CatalogChangesAfter(b.ctx, all[2].Seq, 10); err != nil || len(got.Changes)+len(got.Polls) != 0 {
		t.Fatalf("at the log's end: %+v %v, want nothing", got, err)
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
		u, err := b.store.CatalogChangesAfter(b.ctx, last, 7)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range u.Changes {
			seen[c.Target] = true
			last = c.Seq
		}
		for _, p := range u.Polls { // read in the changes' snapshot: each is there
			if !slices.ContainsFunc(u.Changes, func(c ledger.CatalogChange) bool { return c.Target == p.ID }) {
				t.Fatalf("poll %s read without a change naming it", p.ID)
			}
		}
		if len(u.Polls) != len(u.Changes) {
			t.Fatalf("%d polls read for %d changes of as many polls", len(u.Polls), len(u.Changes))
		}
		if finished && len(u.Changes) > 0 {
			finished = false // read to the end
		}
	}
	if len(seen) != writers*each {
		t.Fatalf("the reader saw %d of %d polls created", len(seen), writers*each)
	}
}

// TestCatalogChangesReadTheirPolls: a page of changes comes with each poll
// its changes name, once, as the statement's snapshot holds it (a poll
// named twice is read once, on the row of its last change), and without
// a poll that no longer exists; principals and keys are named, not read.
// A page boundary splits what each page reads.
func TestCatalogChangesReadTheirPolls(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll(t, "p1", "a", "b")
	if err := b.store.CreatePoll(b.ctx, ledger.Poll{ID: "p2", Title: "Listed", Choices: []string{"x"}, Eligible: []string{"e2", "e1"}}); err != nil {
		t.Fatal(err)
	}
	if err := b.store.ClosePoll(b.ctx, "p1", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := b.store.RevokePrincipal(b.ctx, "o-subject"); err != nil {
		t.Fatal(err)
	}
	// A change naming a poll that is not there (deleted behind the
	// triggers' back).
	if _, err := b.db.Pool.Exec(b.ctx, `INSERT INTO catalog_changes (kind, target) VALUES ('poll', 'gone')`); err != nil {
		t.Fatal(err)
	}
	u, err := b.store.CatalogChangesAfter(b.ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var named []string
	for _, c := range u.Changes {
		named = append(named, c.Kind+":"+c.Target)
	}
	if want := []string{"poll:p1", "poll:p2", "poll:p1", "principal:o-subject", "poll:gone"}; !slices.Equal(named, want) {
		t.Fatalf("changes %v, want %v", named, want)
	}
	byID := map[string]ledger.Poll{}
	for _, p := range u.Polls {
		if _, twice := byID[p.ID]; twice {
			t.Fatalf("poll %s read twice in one page", p.ID)
		}
		byID[p.ID] = p
	}
	if len(byID) != 2 || byID["p1"].ClosesAt == nil || !slices.Equal(byID["p1"].Choices, []string{"a", "b"}) ||
		!slices.Equal(byID["p2"].Eligible, []string{"e1", "e2"}) || byID["p2"].Eligibility != ledger.EligibleList {
		t.Fatalf("polls read %+v, want p1 closed and p2 with its list", u.Polls)
	}
	// Pages of two: p1 in the first and in the second, read in each.
	for _, page := range []struct {
		after int64
		polls []string
	}{{0, []string{"p1", "p2"}}, {u.Changes[1].Seq, []string{"p1"}}, {u.Changes[3].Seq, nil}} {
		got, err := b.store.CatalogChangesAfter(b.ctx, page.after, 2)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, p := range got.Polls {
			ids = append(ids, p.ID)
		}
		slices.Sort(ids)
		if len(got.Changes) == 0 || !slices.Equal(ids, page.polls) {
			t.Fatalf("the page after %d read polls %v for changes %v, want %v", page.after, ids, got.Changes, page.polls)
		}
	}
	if _, err := b.store.CatalogChangesAfter(b.ctx, 0, 0); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("a limit of 0: %v, want ErrInvalid", err)
	}
}
