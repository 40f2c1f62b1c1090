package testenv

import (
	"errors"
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

// Condition is what Eventually polls: a func() bool that holds or not, or
// a func() error that is nil once it holds and otherwise says what is
// still missing (the failure shows the last such error).
type Condition interface {
	func() bool | func() error
}

// Eventually polls cond every 10ms until it holds, at most d; past d it
// fails t (Fatal) saying what it waited for and, for a func() error, the
// last error. Wait this way only for a state with no event to receive: a
// channel, a WaitGroup or a log line the code under test produces is
// waited for with Receive or WaitGroup instead.
func Eventually[C Condition](t testing.TB, d time.Duration, what string, cond C) {
	t.Helper()
	check := func() error {
		switch c := any(cond).(type) {
		case func() bool:
			if !c() {
				return errNotYet
			}
			return nil
		default:
			return c.(func() error)()
		}
	}
	deadline := time.Now().Add(d)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			if err == errNotYet {
				t.Fatalf("after %s: still waiting for %s", d, what)
			}
			t.Fatalf("after %s: still waiting for %s; last: %v", d, what, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// errNotYet is a func() bool condition's "not yet".
var errNotYet = errors.New("not yet")
