package ledger_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"tally/internal/testenv"
	"tally/ledger"
)

// TestAdminActionsFollowed: a reader that follows the record (each read
// after the last id it saw, as tally admin log --after does) misses no
// action, even when two changes commit in another order than they were
// made: the one that began first is held open while another commits.
func TestAdminActionsFollowed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first, err := b.db.Pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(b.ctx)
	if _, err := first.Exec(b.ctx, `INSERT INTO principals (id, name) VALUES ('p-first', 'first')`); err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() {
		_, err := b.store.AddPrincipals(b.ctx, []string{"second"}, "")
		second <- err
	}()
	// Until the second change committed, or waits for the first.
	var done bool
	var doneErr error
	testenv.Eventually(t, 5*time.Second, "the second change to commit or wait for the first", func() bool {
		select {
		case doneErr = <-second:
			done = true
			return true
		default:
		}
		var waiting int
		if err := b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return waiting > 0
	})

	var seen []int64
	follow := func() {
		after := int64(0)
		if len(seen) > 0 {
			after = seen[len(seen)-1]
		}
		page, err := b.store.AdminActions(b.ctx, after, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range page {
			seen = append(seen, a.ID)
		}
	}
	follow()
	if err := first.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if !done {
		doneErr = testenv.Receive(t, second, 5*time.Second, "the second change to commit once the first did")
	}
	if doneErr != nil {
		t.Fatal(doneErr)
	}
	follow()
	var all []int64
	for _, a := range actions(t, b) {
		all = append(all, a.ID)
	}
	if len(all) != 2 || !slices.Equal(seen, all) {
		t.Fatalf("the follower saw actions %v, but the record holds %v", seen, all)
	}
	if _, err := b.store.Principal(b.ctx, "p-first"); err != nil {
		t.Fatal(err)
	}
}

// TestAdminChangesAtOnce: changes of the catalog made at once, each
// recorded, wait for each other and never deadlock: with one attempt a
// transaction (no retry of a deadlock), every one succeeds and is
// recorded once.
func TestAdminChangesAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	once, err := ledger.New(b.db.Pool, ledger.Config{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	ps, err := b.store.AddPrincipals(b.ctx, []string{"a", "b", "c", "d", "e", "f", "g", "h"}, "")
	if err != nil {
		t.Fatal(err)
	}
	b.poll(t, "open", "x")
	errs := make(chan error, 3*len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { errs <- once.RevokePrincipal(b.ctx, p.ID) })
		wg.Go(func() {
			_, err := once.AddPrincipals(b.ctx, []string{"more"}, "")
			errs <- err
		})
		wg.Go(func() {
			errs <- once.CreatePoll(b.ctx, ledger.Poll{ID: fmt.Sprintf("q%d", i), Title: "Q", Choices: []string{"x"}})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a change made at once with others: %v", err)
		}
	}
	var revokes, adds, creates int
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FILTER (WHERE action = 'principal.revoke'),
       count(*) FILTER (WHERE action = 'principal.add'), count(*) FILTER (WHERE action = 'poll.create') FROM admin_actions`).
		Scan(&revokes, &adds, &creates); err != nil {
		t.Fatal(err)
	}
	if n := len(ps); revokes != n || adds != 2*n || creates != n+1 {
		t.Fatalf("admin_actions: %d revokes, %d adds, %d creates; want %d, %d, %d", revokes, adds, creates, n, 2*n, n+1)
	}
}
