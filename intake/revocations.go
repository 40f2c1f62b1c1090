package intake

import (
	"sync"

	"tally/ledger"
)

// This file owns what intake refuses whatever a token says: the revoked
// principals and the retired credential keys, held whole in memory.

// revocations holds every revoked principal and retired credential key,
// loaded whole at start and kept current by the follower of the catalog's
// change log (changes.go), which reads again only the principals and keys
// a change names. Every request is checked against it, in every state:
// while PostgreSQL does not answer, the revocations read last still hold.
type revocations struct {
	mu  sync.RWMutex
	cur *ledger.Revocations // nil until the first load
}

// refuses reports whether a credential of principalID signed by keyID
// ("" for a token without a key) must be refused. loaded is false until
// the first load; nothing can be told then.
func (r *revocations) refuses(principalID, keyID string) (refused, loaded bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	cur := r.cur
	if cur == nil {
		return false, false
	}
	if _, ok := cur.Principals[principalID]; ok {
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
func (r *revocations) loaded() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.cur != nil
}

// replace makes all the whole of the revocations.
func (r *revocations) replace(all ledger.Revocations) {
	r.mu.Lock()
	r.cur = &all
	r.mu.Unlock()
}

// apply replaces what it holds of principals and keys with fresh, what
// PostgreSQL now holds of them (ledger.Store.RevocationsOf).
func (r *revocations) apply(principals, keys []string, fresh ledger.Revocations) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range principals {
		delete(r.cur.Principals, id)
		if v, ok := fresh.Principals[id]; ok {
			r.cur.Principals[id] = v
		}
	}
	for _, id := range keys {
		delete(r.cur.Keys, id)
		if v, ok := fresh.Keys[id]; ok {
			r.cur.Keys[id] = v
		}
	}
}
