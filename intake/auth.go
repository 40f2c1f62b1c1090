package intake

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tally/ledger"
	"tally/stream"
)

// errUnauthenticated: the token is unknown or revoked.
var errUnauthenticated = errors.New("unknown or revoked token")

// authCache maps the SHA-256 of a bearer token to its voter, for at most
// ttl (negTTL for an unknown token). Tokens are never kept in clear. A
// voter past its TTL is looked up again; only when that lookup fails (or
// is skipped, see pgState) is it still served, for at most staleMax after
// PostgreSQL last vouched for it: a principal revoked just before
// PostgreSQL stopped answering may vote until it answers again, but no
// longer than that.
type authCache struct {
	store     *ledger.Store
	keys      stream.Keys
	pg        *pgState
	staleUsed prometheus.Counter // voters served past their TTL
	ttl       time.Duration
	negTTL    time.Duration
	staleMax  time.Duration
	max       int
	timeout   time.Duration

	mu sync.Mutex
	m  map[[32]byte]authEntry
}

type authEntry struct {
	voter   *voter    // nil for an unknown or revoked token
	expires time.Time // served as it is until then
	// staleUntil bounds its use past expires while PostgreSQL does not
	// answer; zero for an unknown token, which is never served stale.
	staleUntil time.Time
}

func newAuthCache(store *ledger.Store, keys stream.Keys, cfg Config, pg *pgState, staleUsed prometheus.Counter) *authCache {
	return &authCache{
		store: store, keys: keys, pg: pg, staleUsed: staleUsed,
		ttl: cfg.AuthTTL, negTTL: cfg.AuthNegativeTTL, staleMax: cfg.AuthStaleMax, max: cfg.AuthCacheSize,
		timeout: cfg.PostgresTimeout, m: map[[32]byte]authEntry{},
	}
}

// authenticate returns the voter of token. It answers errUnauthenticated
// for an unknown or revoked token, and another error when PostgreSQL could
// not tell and the token has no voter it may still serve. A lookup in
// PostgreSQL ends by deadline too, unless it is zero.
func (a *authCache) authenticate(ctx context.Context, token string, deadline time.Time) (*voter, error) {
	key := ledger.TokenHash(token)
	now := time.Now()
	a.mu.Lock()
	e := a.m[key]
	a.mu.Unlock()
	if now.Before(e.expires) {
		if e.voter == nil {
			return nil, errUnauthenticated
		}
		return e.voter, nil
	}
	if a.pg.skip(now) {
		return a.stale(e, now, errPostgresDown)
	}
	lctx, cancel := boundedContext(ctx, a.timeout, deadline)
	p, err := a.store.Authenticate(lctx, token)
	cancel()
	a.pg.observe(ctx, err)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		a.put(key, authEntry{expires: time.Now().Add(a.negTTL)})
		return nil, errUnauthenticated
	case err != nil:
		return a.stale(e, now, err)
	}
	v := newVoter(p, a.keys)
	now = time.Now()
	a.put(key, authEntry{voter: v, expires: now.Add(a.ttl), staleUntil: now.Add(a.staleMax)})
	return v, nil
}

// stale returns the voter of e, an entry past its TTL (or none), when
// PostgreSQL could not be asked (err) and e may still be served; else err.
func (a *authCache) stale(e authEntry, now time.Time, err error) (*voter, error) {
	if e.voter == nil || !now.Before(e.staleUntil) {
		return nil, err
	}
	a.staleUsed.Inc()
	return e.voter, nil
}

func (a *authCache) put(key [32]byte, e authEntry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.m) >= a.max {
		a.evict(time.Now())
	}
	a.m[key] = e
}

// evict frees a tenth of the cache: first the entries that may no longer
// be served at all, then those past their TTL (served only while
// PostgreSQL does not answer), then arbitrary ones (map order is random).
func (a *authCache) evict(now time.Time) {
	target := a.max - a.max/10
	for _, keep := range []func(authEntry) bool{
		func(e authEntry) bool { return now.Before(e.expires) || now.Before(e.staleUntil) },
		func(e authEntry) bool { return now.Before(e.expires) },
		func(authEntry) bool { return false },
	} {
		for k, e := range a.m {
			if len(a.m) < target {
				return
			}
			if !keep(e) {
				delete(a.m, k)
			}
		}
	}
}

// expireAll makes every cached token be looked up again on its next use,
// after a change to the principals (a revocation takes effect at once).
// The voters stay, to be served while PostgreSQL does not answer.
func (a *authCache) expireAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, e := range a.m {
		e.expires = time.Time{}
		a.m[k] = e
	}
}

// boundedContext is ctx bounded by timeout from now and by deadline, unless
// it is zero.
func boundedContext(ctx context.Context, timeout time.Duration, deadline time.Time) (context.Context, context.CancelFunc) {
	d := time.Now().Add(timeout)
	if !deadline.IsZero() && deadline.Before(d) {
		d = deadline
	}
	return context.WithDeadline(ctx, d)
}
