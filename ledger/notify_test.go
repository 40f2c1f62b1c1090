package ledger_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"tally/internal/testenv"
	"tally/ledger"
)

// TestWatchResults: the watcher says "" once it listens; an append
// notifies each poll it added rows to once, at commit, whatever the
// batch's size, and a batch that adds no row (a replay, a rejection)
// notifies nothing. The daemons' role may notify: an append as
// tally_daemon is heard. A LISTEN connection killed under the watcher is
// re-established and says "" again. The watcher returns when its context
// ends.
func TestWatchResults(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll(t, "p1", "a", "b")
	b.poll(t, "p2", "a", "b")
	ctx, cancel := context.WithCancel(b.ctx)
	heard := make(chan string, 100)
	var wg sync.WaitGroup
	wg.Go(func() { b.store.WatchResults(ctx, func(p string) { heard <- p }) })
	defer testenv.WaitGroup(t, &wg, 10*time.Second, "WatchResults to return once its context ended")
	defer cancel()

	wantHeard(t, heard, "") // listening
	batch := []ledger.Event{ev("u1", "k", "p1", "a"), ev("u2", "k", "p1", "b"), ev("u3", "k", "p2", "a"),
		ev("u4", "k", "p1", "a"), ev("u1", "k2", "p2", "b")}
	if _, err := b.store.Append(b.ctx, batch); err != nil {
		t.Fatal(err)
	}
	wantHeard(t, heard, "p1", "p2")

	// A replay and a second answer add no row: nothing to tell.
	if _, err := b.store.Append(b.ctx, []ledger.Event{batch[0], ev("u1", "k3", "p1", "b")}); err != nil {
		t.Fatal(err)
	}
	// The daemons' role appends, and is heard.
	d := asDaemon(t, b)
	if _, err := d.store.Append(b.ctx, []ledger.Event{ev("u9", "k", "p2", "a")}); err != nil {
		t.Fatalf("append as tally_daemon: %v", err)
	}
	wantHeard(t, heard, "p2") // and not p1 of the replay before it

	var killed int
	if err := b.db.Pool.QueryRow(b.ctx, `
SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE datname = current_database() AND query = 'LISTEN tally_results'`).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	if killed != 1 {
		t.Fatalf("terminated %d LISTEN connections, want 1", killed)
	}
	wantHeard(t, heard, "") // reconnected
	if _, err := b.store.Append(b.ctx, []ledger.Event{ev("u8", "k", "p1", "b")}); err != nil {
		t.Fatal(err)
	}
	wantHeard(t, heard, "p1")

	cancel()
	testenv.WaitGroup(t, &wg, 5*time.Second, "WatchResults to return once its context ended")
	select {
	case p := <-heard:
		t.Fatalf("heard %q more than was appended", p)
	default:
	}
}

// wantHeard reads the next len(want) notifications, in any order, and
// fails unless they are want.
func wantHeard(t *testing.T, heard <-chan string, want ...string) {
	t.Helper()
	var got []string
	timeout := time.After(10 * time.Second)
	for len(got) < len(want) {
		select {
		case p := <-heard:
			got = append(got, p)
		case <-timeout:
			t.Fatalf("heard %q within 10s, want %q", got, want)
		}
	}
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		t.Fatalf("heard %q, want %q", got, want)
	}
}
