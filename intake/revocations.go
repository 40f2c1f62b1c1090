package intake

import (
	"sync"
	"time"

	"tally/ledger"
)

// This file owns what intake refuses whatever a token says: the revoked
// principals, the retired credential keys and the tokens a reissue
// replaced, held whole in memory.

// revocations holds every revoked principal, retired credential key and
// reissued principal's valid-after time (ledger.ReissuePrincipal), loaded
// whole at start and kept current by the follower of the catalog's
// change log (changes.go), which reads again only the principals and keys
// a change names. Every request is checked against it, in every state:
// while PostgreSQL does not answer, the revocations read last still hold.
type revocations struct {
	mu  sync.RWMutex
	cur *ledger.Revocations // nil until the first load
}

// refuses reports whether a credential of principalID signed by tally's
// own key keyID ("" for a token without one: an OpenID Connect issuer's
// keys are never retired here) and issued at issuedAt (zero for a token
// that does not say) must be refused: its principal was revoked, its key
// retired, or its principal reissued a token after issuedAt. loaded is
// false until the first load; nothing can be told then.
func (r *revocations) refuses(principalID, keyID string, issuedAt time.Time) (refused, loaded bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	cur := r.cur
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
		delete(r.cur.ValidAfter, id)
		if v, ok := fresh.ValidAfter[id]; ok {
			if r.cur.ValidAfter == nil {
				r.cur.ValidAfter = map[string]time.Time{}
			}
			r.cur.ValidAfter[id] = v
		}
	}
	for _, id := range keys {
		delete(r.cur.Keys, id)
		if v, ok := fresh.Keys[id]; ok {
			r.cur.Keys[id] = v
		}
	}
}
