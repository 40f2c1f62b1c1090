package testenv

import (
	"sync"
	"testing"
	"time"
)

// A test that waits waits with a deadline and, past it, fails saying what
// it waited for: a bug that blocks a goroutine (a lock never released, a
// pool exhausted, a signal never sent) then fails one test with a message
// instead of hanging the package until go test's timeout.

// WaitGroup waits for wg, at most d; past d it fails t (Fatal) saying what
// the goroutines were doing. The goroutines are still running then: give
// them a context that ends with the test (t.Context) so they stop too.
func WaitGroup(t testing.TB, wg *sync.WaitGroup, d time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("after %s: still waiting for %s", d, what)
	}
}

// Receive returns the next value sent on ch (or the zero value, once ch is
// closed), waiting at most d; past d it fails t (Fatal) saying what it
// waited for.
func Receive[T any](t testing.TB, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("after %s: still waiting for %s", d, what)
		panic("unreachable")
	}
}
