package ledger

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/sethvargo/go-retry"
)

// listenCatalogSQL subscribes to the channel migration 00015's triggers
// notify when the catalog's change log grows; the payload is the highest
// seq the transaction wrote.
const listenCatalogSQL = `LISTEN tally_catalog`

// WatchCatalog holds one connection that listens for catalog changes and
// calls fn with the seq of each notification (the last change its
// transaction wrote), until ctx ends. When the connection fails it
// reconnects, with a backoff from 100ms doubling up to 10s, which starts
// again at 100ms once a connection was listening. On every
// (re)connection, once LISTEN took effect, fn is called with 0, since
// notifications may have been missed meanwhile: changes read after that
// call miss nothing a later notification would not report. fn runs on the
// listening goroutine: it should only note the change and return.
func (s *Store) WatchCatalog(ctx context.Context, fn func(seq int64)) {
	s.keepListening(ctx, "catalog", func(ctx context.Context) (bool, error) { return s.watchOnce(ctx, fn) })
}

// keepListening runs once (one listening connection, until it fails) again
// and again until ctx ends: after a backoff from 100ms doubling up to 10s,
// which starts again once a connection listened. what names the listener
// in the log.
func (s *Store) keepListening(ctx context.Context, what string, once func(context.Context) (listened bool, err error)) {
	var last error // why the last connection ended
	newBackoff := func() retry.Backoff {
		return retry.WithCappedDuration(10*time.Second, retry.NewExponential(100*time.Millisecond))
	}
	backoff := newBackoff()
	logged := retry.BackoffFunc(func() (time.Duration, bool) {
		d, stop := backoff.Next()
		s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, what+" listener lost; reconnecting",
			slog.String("component", "ledger"), slog.String("error", last.Error()), slog.Duration("backoff", d))
		return d, stop
	})
	_ = retry.Do(ctx, logged, func(ctx context.Context) error {
		var listened bool
		listened, last = once(ctx)
		if listened {
			backoff = newBackoff() // a connection that worked was not a failure in a row
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return retry.RetryableError(last)
	})
}

// watchOnce listens on one connection until it fails or ctx ends.
// listened reports that the LISTEN took effect.
func (s *Store) watchOnce(ctx context.Context, fn func(int64)) (listened bool, err error) {
	pconn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	conn := pconn.Hijack() // a LISTENing connection must not go back to the pool
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, listenCatalogSQL); err != nil {
		return false, err
	}
	fn(0)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		seq, err := strconv.ParseInt(n.Payload, 10, 64)
		if err != nil || seq <= 0 {
			seq = 0 // not a seq: read whatever changed
		}
		fn(seq)
	}
}
