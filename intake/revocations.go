package intake

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"tally/ledger"
)

// This file owns what intake refuses whatever a token says: the revoked
// principals, the retired credential keys and the tokens a reissue
// replaced, held whole in memory.

// revocations holds every revoked principal, retired credential key and
// reissued principal's valid-after time (ledger.ReissuePrincipal),
// loaded at start and again on every change the catalog's watcher reports
// (the NOTIFY of a revocation, and every reconnection of the listener,
// since notifications may have been missed meanwhile) and every
// refreshEvery. A reload that fails is tried again every retryEvery until
// one succeeds. Every request is checked against it, in every state: while
// PostgreSQL does not answer, the revocations read last still hold.
type revocations struct {
	store        *ledger.Store
	pg           *pgState
	log          *slog.Logger
	refreshEvery time.Duration
	retryEvery   time.Duration
	timeout      time.Duration

	cur atomic.Pointer[ledger.Revocations] // nil until the first load
	// reloading orders the reloads, as catalog's does.
	reloading sync.Mutex
	kick      chan struct{}
}

func newRevocations(store *ledger.Store, log *slog.Logger, cfg Config, pg *pgState) *revocations {
	return &revocations{
		store: store, pg: pg, log: log, refreshEvery: cfg.CatalogRefresh, retryEvery: time.Second,
		timeout: cfg.PostgresTimeout, kick: make(chan struct{}, 1),
	}
}

// refuses reports whether a credential of principalID signed by tally's
// own key keyID ("" for a token without one: an OpenID Connect issuer's
// keys are never retired here) and issued at issuedAt (zero for a token
// that does not say) must be refused: its principal was revoked, its key
// retired, or its principal reissued a token after issuedAt. loaded is
// false until the first load; nothing can be told then.
func (r *revocations) refuses(principalID, keyID string, issuedAt time.Time) (refused, loaded bool) {
	cur := r.cur.Load()
	if cur == nil {
		return false, false
	}
	if _, ok := cur.Principals[principalID]; ok {
		return true, true
	}
	if after, ok := cur.ValidAfter[principalID]; ok && issuedAt.Before(after) {
		return true, true
	}
	if keyID != "" {
		if _, ok := cur.Keys[keyID]; ok {
			return true, true
		}
	}
	return false, true
}

// loaded reports whether the revocations were loaded once.
func (r *revocations) loaded() bool { return r.cur.Load() != nil }

// requestReload asks run for a reload without waiting for it.
func (r *revocations) requestReload() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// run reloads at start, when asked and every refreshEvery, until ctx is
// done.
func (r *revocations) run(ctx context.Context) {
	t := time.NewTicker(r.refreshEvery)
	defer t.Stop()
	for {
		wait := (<-chan time.Time)(nil)
		if err := r.reload(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			r.log.LogAttrs(ctx, slog.LevelWarn, "revocations reload failed; refusing by the ones read before, and trying again",
				slog.String("error", err.Error()), slog.Duration("retry_in", r.retryEvery))
			wait = time.After(r.retryEvery)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.kick:
		case <-wait:
		}
	}
}

func (r *revocations) reload(ctx context.Context) error {
	r.reloading.Lock()
	defer r.reloading.Unlock()
	lctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	rev, err := r.store.Revocations(lctx)
	r.pg.observe(ctx, err)
	if err != nil {
		return err
	}
	r.cur.Store(&rev)
	return nil
}
