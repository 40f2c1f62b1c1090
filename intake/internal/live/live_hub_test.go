package live

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"tally/internal/testenv"
)

// This file tests the live hub alone, with a fake store: a burst of
// notifications costs one read, a viewer that does not read holds up no
// other, the bound on viewers, and the listener's life.

// fakeFeed is the store as the hub sees it: reads counted and numbered,
// and the listener's callback once it listens.
type fakeFeed struct {
	reads     atomic.Int64
	readDelay time.Duration
	listeners atomic.Int64 // running
	notify    chan func(string)
}

func newFakeFeed() *fakeFeed { return &fakeFeed{notify: make(chan func(string), 10)} }

func (f *fakeFeed) read(ctx context.Context, poll string) ([]byte, error) {
	n := f.reads.Add(1)
	if f.readDelay > 0 {
		time.Sleep(f.readDelay)
	}
	return []byte(fmt.Sprintf("%s %d", poll, n)), ctx.Err()
}

func (f *fakeFeed) watch(ctx context.Context, fn func(string)) {
	f.listeners.Add(1)
	defer f.listeners.Add(-1)
	f.notify <- fn
	<-ctx.Done()
}

func newTestHub(t *testing.T, f *fakeFeed, interval time.Duration, most int) *liveHub {
	t.Helper()
	h := newLiveHub(liveHubConfig{read: f.read, watch: f.watch, interval: interval, idle: time.Hour, max: most})
	t.Cleanup(h.close)
	return h
}

// next waits for v's next frame.
func next(t *testing.T, v *liveViewer) string {
	t.Helper()
	select {
	case <-v.wake:
		return string(v.take())
	case <-time.After(5 * time.Second):
		t.Fatal("no frame within 5s")
		return ""
	}
}

// TestLiveHubCoalesces: a viewer gets the figures read at once; then a
// burst of notifications of its poll within the interval costs one read,
// which every viewer of the poll gets; notifications of a poll no one
// watches cost none, and "" (the listener reconnected) one per watched
// poll.
func TestLiveHubCoalesces(t *testing.T) {
	t.Parallel()
	f := newFakeFeed()
	const interval = 100 * time.Millisecond
	h := newTestHub(t, f, interval, 10)
	ctx := context.Background()
	v1, err := h.subscribe(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if got := next(t, v1); got != "p 1" {
		t.Fatalf("first frame %q, want p 1", got)
	}
	notify := testenv.Receive(t, f.notify, 5*time.Second, "the hub to listen for notifications")
	v2, err := h.subscribe(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if got := next(t, v2); got != "p 1" {
		t.Fatalf("a second viewer's first frame %q, want the last read, p 1, without a read of its own", got)
	}
	for range 1000 {
		notify("p")
		notify("elsewhere")
	}
	if got1, got2 := next(t, v1), next(t, v2); got1 != "p 2" || got2 != "p 2" {
		t.Fatalf("after a burst: %q and %q, want p 2 for both", got1, got2)
	}
	time.Sleep(3 * interval)
	if n := f.reads.Load(); n != 2 {
		t.Fatalf("%d reads for a first viewer and a burst of 1000 notifications, want 2", n)
	}
	w, err := h.subscribe(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	next(t, w)
	notify("") // reconnected: every watched poll is read again
	if got1, got2 := next(t, v1), next(t, w); got1 != "p 4" && got1 != "p 5" || got2 == "" {
		t.Fatalf("after a reconnection: %q and %q", got1, got2)
	}
	time.Sleep(3 * interval)
	if n := f.reads.Load(); n != 5 {
		t.Fatalf("%d reads, want 5: one per watched poll after a reconnection", n)
	}
}

// TestLiveHubRereadsAfterBusyRead: a change notified while a read is under
// way is read after it, so the last state is never missed.
func TestLiveHubRereadsAfterBusyRead(t *testing.T) {
	t.Parallel()
	f := newFakeFeed()
	f.readDelay = 200 * time.Millisecond
	h := newTestHub(t, f, 10*time.Millisecond, 10)
	v, err := h.subscribe(context.Background(), "p")
	if err != nil {
		t.Fatal(err)
	}
	notify := testenv.Receive(t, f.notify, 5*time.Second, "the hub to listen for notifications")
	testenv.Eventually(t, 5*time.Second, "the first read to be under way", func() bool { return f.reads.Load() == 1 })
	notify("p")
	if got := next(t, v); got != "p 1" {
		t.Fatalf("first frame %q", got)
	}
	if got := next(t, v); got != "p 2" {
		t.Fatalf("after a change during the read: %q, want p 2", got)
	}
}

// TestLiveHubSlowViewer: a viewer that takes nothing holds up neither the
// hub nor another viewer of its poll; when it takes, it gets the latest
// state alone.
func TestLiveHubSlowViewer(t *testing.T) {
	t.Parallel()
	f := newFakeFeed()
	h := newTestHub(t, f, time.Millisecond, 10)
	ctx := context.Background()
	slow, err := h.subscribe(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	fast, err := h.subscribe(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	notify := testenv.Receive(t, f.notify, 5*time.Second, "the hub to listen for notifications")
	next(t, fast)
	const updates = 50
	for i := range updates {
		notify("p")
		if got, want := next(t, fast), fmt.Sprintf("p %d", i+2); got != want {
			t.Fatalf("update %d: the fast viewer got %q, want %q", i, got, want)
		}
	}
	// The hub offers each state to its viewers one after another: the
	// fast one may have the last before the slow one is offered it.
	last := fmt.Sprintf("p %d", updates+1)
	testenv.Eventually(t, 5*time.Second, "the hub to offer the slow viewer the last state", func() bool {
		slow.mu.Lock()
		defer slow.mu.Unlock()
		return string(slow.frame) == last
	})
	if got := next(t, slow); got != last {
		t.Fatalf("the slow viewer got %q, want the latest state alone, %q", got, last)
	}
	select {
	case <-slow.wake:
		t.Fatalf("the slow viewer has more: %q", slow.take())
	default:
	}
}

// TestLiveHubBound: past its most viewers the hub refuses one; a viewer
// leaving frees its place; once closed, it refuses every viewer and its
// streams end.
func TestLiveHubBound(t *testing.T) {
	t.Parallel()
	f := newFakeFeed()
	h := newTestHub(t, f, time.Millisecond, 2)
	ctx := context.Background()
	a, err := h.subscribe(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.subscribe(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.subscribe(ctx, "p"); !errors.Is(err, errLiveFull) {
		t.Fatalf("a third viewer: %v, want errLiveFull", err)
	}
	h.unsubscribe(a)
	h.unsubscribe(a) // twice is safe
	if _, err := h.subscribe(ctx, "p"); err != nil {
		t.Fatalf("after one left: %v", err)
	}
	h.close()
	select {
	case <-h.done:
	default:
		t.Fatal("closing did not end the streams")
	}
	if _, err := h.subscribe(ctx, "p"); !errors.Is(err, errLiveClosed) {
		t.Fatalf("after close: %v, want errLiveClosed", err)
	}
	if n := f.listeners.Load(); n != 0 {
		t.Fatalf("%d listeners after close", n)
	}
}

// TestLiveHubListensWhileWatched: the listener starts with the first
// viewer and stops idle after the last, and starts again with the next.
func TestLiveHubListensWhileWatched(t *testing.T) {
	t.Parallel()
	f := newFakeFeed()
	h := newLiveHub(liveHubConfig{read: f.read, watch: f.watch, interval: time.Millisecond, idle: 50 * time.Millisecond, max: 10})
	defer h.close()
	if n := f.listeners.Load(); n != 0 {
		t.Fatalf("%d listeners before any viewer", n)
	}
	for round := range 2 {
		v, err := h.subscribe(context.Background(), "p")
		if err != nil {
			t.Fatal(err)
		}
		testenv.Receive(t, f.notify, 5*time.Second, "the hub to listen again for a new viewer")
		if n := f.listeners.Load(); n != 1 {
			t.Fatalf("round %d: %d listeners with a viewer, want 1", round, n)
		}
		h.unsubscribe(v)
		testenv.Eventually(t, 5*time.Second, fmt.Sprintf("round %d: the listener to stop once the last viewer left", round),
			func() bool { return f.listeners.Load() == 0 })
	}
}
