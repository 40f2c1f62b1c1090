package intake

import (
	"context"
	"errors"
	"sync"
	"time"

	"tally/ledger"
	"tally/stream"
)

// errUnauthenticated: the token is unknown or revoked.
var errUnauthenticated = errors.New("unknown or revoked token")

// voter is an authenticated principal with what all its votes send to Redis
// made once: the enqueue script's arguments that depend on the principal
// only, boxed as go-redis takes them.
type voter struct {
	ledger.Principal
	shard      int
	idArg      any    // the principal id
	rateKeyArg any    // the key of its rate-limit bucket
	idemPrefix string // its idempotency keys are idemPrefix + event id; "" if not
}

func newVoter(p ledger.Principal, keys stream.Keys) *voter {
	v := &voter{Principal: p, shard: keys.ShardOf(p.ID), idArg: p.ID, rateKeyArg: keys.RateLimit(p.ID)}
	// The stream package names the record; use the shortcut only where its
	// name is this concatenation.
	if prefix := keys.Idempotency(p.ID, ""); keys.Idempotency(p.ID, "e-1") == prefix+"e-1" {
		v.idemPrefix = prefix
	}
	return v
}

// idempotencyKey is the key of the record of the voter's clientEventID.
func (v *voter) idempotencyKey(keys stream.Keys, clientEventID string) string {
	if v.idemPrefix != "" {
		return v.idemPrefix + clientEventID
	}
	return keys.Idempotency(v.ID, clientEventID)
}

// authCache maps the SHA-256 of a bearer token to its voter, for at most
// ttl (negTTL for an unknown token). Tokens are never kept in clear.
type authCache struct {
	store   *ledger.Store
	keys    stream.Keys
	ttl     time.Duration
	negTTL  time.Duration
	max     int
	timeout time.Duration

	mu sync.Mutex
	m  map[[32]byte]authEntry
}

type authEntry struct {
	voter   *voter // nil for an unknown or revoked token
	expires time.Time
}

func newAuthCache(store *ledger.Store, keys stream.Keys, cfg Config) *authCache {
	return &authCache{
		store: store, keys: keys, ttl: cfg.AuthTTL, negTTL: cfg.AuthNegativeTTL, max: cfg.AuthCacheSize,
		timeout: cfg.PostgresTimeout, m: map[[32]byte]authEntry{},
	}
}

// authenticate returns the voter of token. It answers errUnauthenticated
// for an unknown or revoked token, and another error when PostgreSQL could
// not tell. A lookup in PostgreSQL ends by deadline too, unless it is zero.
func (a *authCache) authenticate(ctx context.Context, token string, deadline time.Time) (*voter, error) {
	key := ledger.TokenHash(token)
	now := time.Now()
	a.mu.Lock()
	e, hit := a.m[key]
	a.mu.Unlock()
	if hit && now.Before(e.expires) {
		if e.voter == nil {
			return nil, errUnauthenticated
		}
		return e.voter, nil
	}
	ctx, cancel := boundedContext(ctx, a.timeout, deadline)
	defer cancel()
	p, err := a.store.Authenticate(ctx, token)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		a.put(key, authEntry{expires: time.Now().Add(a.negTTL)})
		return nil, errUnauthenticated
	case err != nil:
		return nil, err
	}
	v := newVoter(p, a.keys)
	a.put(key, authEntry{voter: v, expires: time.Now().Add(a.ttl)})
	return v, nil
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

// boundedContext is ctx bounded by timeout from now and by deadline, unless
// it is zero.
func boundedContext(ctx context.Context, timeout time.Duration, deadline time.Time) (context.Context, context.CancelFunc) {
	d := time.Now().Add(timeout)
	if !deadline.IsZero() && deadline.Before(d) {
		d = deadline
	}
	return context.WithDeadline(ctx, d)
}
