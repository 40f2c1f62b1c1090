package intake

import (
	"context"
	"errors"
	"sync"
	"time"

	"tally/ledger"
)

// errUnauthenticated: the token is unknown or revoked.
var errUnauthenticated = errors.New("unknown or revoked token")

// authCache maps the SHA-256 of a bearer token to its principal, for at
// most ttl (negTTL for an unknown token). Tokens are never kept in clear.
type authCache struct {
	store   *ledger.Store
	ttl     time.Duration
	negTTL  time.Duration
	max     int
	timeout time.Duration

	mu sync.Mutex
	m  map[[32]byte]authEntry
}

type authEntry struct {
	principal ledger.Principal
	ok        bool
	expires   time.Time
}

func newAuthCache(store *ledger.Store, cfg Config) *authCache {
	return &authCache{
		store: store, ttl: cfg.AuthTTL, negTTL: cfg.AuthNegativeTTL, max: cfg.AuthCacheSize,
		timeout: cfg.PostgresTimeout, m: map[[32]byte]authEntry{},
	}
}

// authenticate returns the principal of token. It answers errUnauthenticated
// for an unknown or revoked token, and another error when PostgreSQL could
// not tell.
func (a *authCache) authenticate(ctx context.Context, token string) (ledger.Principal, error) {
	key := ledger.TokenHash(token)
	now := time.Now()
	a.mu.Lock()
	e, hit := a.m[key]
	a.mu.Unlock()
	if hit && now.Before(e.expires) {
		if !e.ok {
			return ledger.Principal{}, errUnauthenticated
		}
		return e.principal, nil
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	p, err := a.store.Authenticate(ctx, token)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		a.put(key, authEntry{expires: time.Now().Add(a.negTTL)})
		return ledger.Principal{}, errUnauthenticated
	case err != nil:
		return ledger.Principal{}, err
	}
	a.put(key, authEntry{principal: p, ok: true, expires: time.Now().Add(a.ttl)})
	return p, nil
}

func (a *authCache) put(key [32]byte, e authEntry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.m) >= a.max {
		now := time.Now()
		for k, old := range a.m {
			if !now.Before(old.expires) {
				delete(a.m, k)
			}
		}
		// Still full: drop an arbitrary tenth (map order is random).
		for k := range a.m {
			if len(a.m) < a.max-a.max/10 {
				break
			}
			delete(a.m, k)
		}
	}
	a.m[key] = e
}

// clear forgets every cached token, after a change to the principals.
func (a *authCache) clear() {
	a.mu.Lock()
	clear(a.m)
	a.mu.Unlock()
}
