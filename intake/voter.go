package intake

import (
	"sync"
	"time"

	"tally/ledger"
	"tally/stream"
)

// This file owns the voter: an authenticated principal with what all its
// votes send to Redis made once, and the bounded cache that keeps the
// voters of signed credentials, so that a principal's next vote does not
// make them again.

// voter is an authenticated principal with what all its votes send to Redis
// made once: the enqueue script's arguments that depend on the principal
// only. A voter is shared by the requests of its principal: nothing
// changes it once made.
type voter struct {
	ledger.Principal
	// expiresAt is when the token that authenticated it expires; zero
	// when it does not (or is of the stored kind, which does not say).
	expiresAt time.Time
	shard     int
	// rateKey is the key of its rate-limit bucket; &rateKey is the
	// script's argument (go-redis writes a *string as its value), which
	// spares a new voter the boxing of a string.
	rateKey    string
	idemPrefix string // its idempotency keys are idemPrefix + event id
}

func newVoter(p ledger.Principal, keys stream.Keys) *voter {
	return &voter{Principal: p, shard: keys.ShardOf(p.ID), rateKey: keys.RateLimit(p.ID),
		idemPrefix: keys.IdempotencyPrefix(p.ID)}
}

// idempotencyKey is the key of the record of the voter's clientEventID
// (stream.Keys.Idempotency).
func (v *voter) idempotencyKey(clientEventID string) string {
	return v.idemPrefix + clientEventID
}

// maxVoters bounds the voters cache: past it the cache starts again
// empty, which costs the voters it held one make each.
const maxVoters = 1 << 16

// voters caches the voters of signed credentials by principal. A voter
// is served only to a credential that says the same of its principal
// (created_at, role, expiry): a reissued token makes a new one.
type voters struct {
	keys stream.Keys
	mu   sync.Mutex
	m    map[string]*voter
}

func newVoters(keys stream.Keys) *voters {
	return &voters{keys: keys, m: make(map[string]*voter)}
}

// get returns the voter of p authenticated by a token that expires at
// expiresAt, made once per principal while it stays the same.
func (vs *voters) get(p ledger.Principal, expiresAt time.Time) *voter {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	if v := vs.m[p.ID]; v != nil && v.Principal == p && v.expiresAt.Equal(expiresAt) {
		return v
	}
	v := newVoter(p, vs.keys)
	v.expiresAt = expiresAt
	if len(vs.m) >= maxVoters {
		clear(vs.m)
	}
	vs.m[p.ID] = v
	return v
}
