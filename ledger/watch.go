package ledger

import (
	"context"
	"log/slog"
	"time"

	"github.com/sethvargo/go-retry"
)

// listenCatalogSQL subscribes to the channel migration 00002's triggers
// notify when polls, choices, eligibility or principals change; the payload
// is the name of the table that changed.
const listenCatalogSQL = `LISTEN tally_catalog`

// CatalogChange says what changed in the catalog.
type CatalogChange struct {
	Polls      bool // polls, their choices or their eligibility lists
	Principals bool // principals (added, revoked) or retired credential keys
}

// WatchCatalog holds one connection that listens for catalog changes and
// calls fn with each, until ctx ends. When the connection fails it
// reconnects, with a backoff from 100ms doubling up to 10s, which starts
// again at 100ms once a connection was listening. On every
// (re)connection fn is called with both Polls and Principals set, since
// notifications may have been missed meanwhile. fn runs on the listening
// goroutine: it should only note the change and return.
func (s *Store) WatchCatalog(ctx context.Context, fn func(CatalogChange)) {
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
func (s *Store) watchOnce(ctx context.Context, fn func(CatalogChange)) (listened bool, err error) {
	pconn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	conn := pconn.Hijack() // a LISTENing connection must not go back to the pool
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, listenCatalogSQL); err != nil {
		return false, err
	}
	fn(CatalogChange{Polls: true, Principals: true})
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		if n.Payload == "principals" || n.Payload == "credential_key_retirements" {
			fn(CatalogChange{Principals: true})
		} else {
			fn(CatalogChange{Polls: true})
		}
	}
}
