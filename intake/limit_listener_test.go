package intake

import (
	"errors"
	"net"
	"testing"
	"testing/synctest"

	"github.com/prometheus/client_golang/prometheus"
)

// TestLimitListenerClose closes a limit listener while Accept waits for a
// slot: Accept returns net.ErrClosed at once, so a shutdown never hangs on
// a full listener; closing a connection twice gives its slot back once.
func TestLimitListenerClose(t *testing.T) {
	// In a bubble, so that the test knows Accept waits for the slot
	// (synctest.Wait) before it closes the listener.
	synctest.Test(t, func(t *testing.T) {
		inner, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln := limitListen(inner, 1, 1, false, prometheus.NewCounter(prometheus.CounterOpts{Name: "refused"}))
		client, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		c.Close()
		if len(ln.slots) != 0 || ln.perAddr.Len() != 0 {
			t.Fatalf("%d slots and %d addresses held after the only connection closed twice", len(ln.slots), ln.perAddr.Len())
		}
		ln.slots <- struct{}{} // hold the only slot
		accepted := make(chan error, 1)
		go func() {
			_, err := ln.Accept()
			accepted <- err
		}()
		synctest.Wait()
		select {
		case err := <-accepted:
			t.Fatalf("Accept returned %v while its only slot was held, want it to wait", err)
		default:
		}
		ln.Close()
		synctest.Wait()
		select {
		case err := <-accepted:
			if !errors.Is(err, net.ErrClosed) {
				t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
			}
		default:
			t.Fatal("Accept still waits for a slot after Close")
		}
	})
}
