package ledger_test

import (
	"slices"
	"testing"
	"time"

	"tally/internal/testenv"
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
	within := time.Now().Add(5 * time.Second)
	for !done {
		select {
		case doneErr = <-second:
			done = true
			continue
		default:
		}
		var waiting int
		if err := b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(within) {
			t.Fatal("the second change neither committed nor waited for the first within 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}

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
