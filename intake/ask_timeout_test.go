package intake

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestAskAfterTheRequestTimedOut: an admin request whose time ran out
// before its read or write was sent (its body read slowly) is not taken
// for PostgreSQL not answering, so the admin writes after it are not
// refused; a query that itself ran out of time still is.
func TestAskAfterTheRequestTimedOut(t *testing.T) {
	s := &Server{pg: newPGState(slog.New(slog.DiscardHandler), prometheus.NewGauge(prometheus.GaugeOpts{Name: "reachable"}))}
	h := host{s}
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	asked := false
	err := h.Ask(expired, func() error { asked = true; return expired.Err() })
	if asked {
		t.Error("a request whose time had run out was sent to PostgreSQL")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Ask after the request's deadline: %v, want context.DeadlineExceeded", err)
	}
	if s.pg.downSince.Load() != 0 || s.pg.skip(time.Now()) {
		t.Fatal("a request that ran out of time before asking marked PostgreSQL as not answering: the next admin writes would be refused 503")
	}

	live, cancelLive := context.WithTimeout(context.Background(), time.Hour)
	defer cancelLive()
	if err := h.Ask(live, func() error { return context.DeadlineExceeded }); err == nil {
		t.Fatal("a query that timed out returned no error")
	}
	if s.pg.downSince.Load() == 0 {
		t.Error("a query that PostgreSQL did not answer in time was not taken for an outage")
	}
}
