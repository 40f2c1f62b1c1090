package testenv

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

// fatalRecorder is a testing.TB whose Fatalf records its message and ends
// the goroutine, as testing.T's does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fatalOf runs f with a fatalRecorder and returns what it failed with ("":
// it did not fail).
func fatalOf(t *testing.T, f func(testing.TB)) string {
	t.Helper()
	r := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a wait with a deadline of milliseconds still waits after 10s")
	}
	return r.msg
}

func TestWaitsFailSayingWhat(t *testing.T) {
	t.Parallel()
	var wg sync.WaitGroup
	wg.Add(1)
	if got, want := fatalOf(t, func(tb testing.TB) { WaitGroup(tb, &wg, 20*time.Millisecond, "the workers") }), "after 20ms: still waiting for the workers"; got != want {
		t.Errorf("WaitGroup past its deadline failed with %q, want %q", got, want)
	}
	wg.Done()
	if got := fatalOf(t, func(tb testing.TB) { WaitGroup(tb, &wg, time.Second, "the workers") }); got != "" {
		t.Errorf("WaitGroup of finished goroutines failed: %q", got)
	}

	ch := make(chan int, 1)
	if got, want := fatalOf(t, func(tb testing.TB) { Receive(tb, ch, 20*time.Millisecond, "a result") }), "after 20ms: still waiting for a result"; got != want {
		t.Errorf("Receive past its deadline failed with %q, want %q", got, want)
	}
	ch <- 7
	var v int
	if got := fatalOf(t, func(tb testing.TB) { v = Receive(tb, ch, time.Second, "a result") }); got != "" || v != 7 {
		t.Errorf("Receive of a sent value: %d, failed with %q; want 7", v, got)
	}
}

func TestEventually(t *testing.T) {
	t.Parallel()
	if got, want := fatalOf(t, func(tb testing.TB) { Eventually(tb, 30*time.Millisecond, "the flag", func() bool { return false }) }), "after 30ms: still waiting for the flag"; got != want {
		t.Errorf("Eventually of a bool that never holds failed with %q, want %q", got, want)
	}
	if got, want := fatalOf(t, func(tb testing.TB) {
		Eventually(tb, 30*time.Millisecond, "the row", func() error { return fmt.Errorf("0 rows") })
	}), "after 30ms: still waiting for the row; last: 0 rows"; got != want {
		t.Errorf("Eventually of an error that stays failed with %q, want %q", got, want)
	}
	calls := 0
	if got := fatalOf(t, func(tb testing.TB) {
		Eventually(tb, 5*time.Second, "the third call", func() error {
			if calls++; calls < 3 {
				return fmt.Errorf("call %d", calls)
			}
			return nil
		})
	}); got != "" || calls != 3 {
		t.Errorf("Eventually of a condition that holds at its third call: %d calls, failed with %q", calls, got)
	}
}
