package intake

import (
	"hash/maphash"
	"sync/atomic"
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

// voterSlots is the size of the voters cache.
const voterSlots = 1 << 16

// voters caches the voters of signed credentials by principal, in
// voterSlots slots: a principal's voter is kept in the slot its id
// hashes to (with a seed of the process's own) until a principal of the
// same slot takes it, which costs the one whose voter went a new one. A
// voter is served only to a credential that says the same of its
// principal (created_at, role, expiry): a reissued token makes a new
// one. A slot is read and written without a lock, and in a burst of
// principals each seen once there is no map to grow and search twice a
// vote (BENCHMARKS.md, issue 37).
type voters struct {
	keys  stream.Keys
	seed  maphash.Seed
	slots []atomic.Pointer[voter]
}

func newVoters(keys stream.Keys) *voters {
	return &voters{keys: keys, seed: maphash.MakeSeed(), slots: make([]atomic.Pointer[voter], voterSlots)}
}

// get returns the voter of p authenticated by a token that expires at
// expiresAt, made once per principal while it stays the same and keeps
// its slot.
func (vs *voters) get(p ledger.Principal, expiresAt time.Time) *voter {
	slot := &vs.slots[maphash.String(vs.seed, p.ID)%voterSlots]
	if v := slot.Load(); v != nil && v.Principal == p && v.expiresAt.Equal(expiresAt) {
		return v
	}
	v := newVoter(p, vs.keys)
	v.expiresAt = expiresAt
	slot.Store(v)
	return v
}
