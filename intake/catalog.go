package intake

import (
	"sync"

	"tally/ledger"
	"tally/vote"
)

// pollInfo is one poll as intake checks votes against it, with the enqueue
// script's arguments that depend on the poll and choice only, made once.
// A ballot of another kind than single is one of too many to make
// beforehand: its arguments are made per vote (answer).
type pollInfo struct {
	poll     ledger.Poll
	rules    vote.Rules // poll.BallotRules()
	idArg    any        // the poll id
	choices  map[string]*choice
	eligible map[string]struct{} // nil for ledger.EligibleAny
}

// choice is the enqueue script's arguments of one answer to a poll: a
// choice of a single-choice poll, or a ballot in canonical form.
type choice struct {
	idArg          any // the candidate id, or the canonical ballot
	fingerprintArg any // vote.FingerprintHex of the poll and idArg
}

// answer is the enqueue arguments of a ballot of the poll in canonical
// form, made for this vote.
func (pi *pollInfo) answer(canonical string) *choice {
	return &choice{idArg: canonical, fingerprintArg: vote.FingerprintHex(pi.poll.ID, canonical)}
}

func newPollInfo(p ledger.Poll) *pollInfo {
	pi := &pollInfo{poll: p, rules: p.BallotRules(), idArg: p.ID, choices: make(map[string]*choice, len(p.Choices))}
	for _, c := range p.Choices {
		pi.choices[c] = &choice{idArg: c, fingerprintArg: vote.FingerprintHex(p.ID, c)}
	}
	if p.Eligibility == ledger.EligibleList {
		pi.eligible = make(map[string]struct{}, len(p.Eligible))
		for _, e := range p.Eligible {
			pi.eligible[e] = struct{}{}
		}
	}
	return pi
}

// choice returns the poll's choice c, or nil.
func (pi *pollInfo) choice(c []byte) *choice { return pi.choices[string(c)] }

func (pi *pollInfo) mayVote(principalID string) bool {
	if pi.eligible == nil {
		return true
	}
	_, ok := pi.eligible[principalID]
	return ok
}

// catalog is the in-process copy of polls, choices and eligibility: all
// of them, loaded whole at start and kept current by the follower of the
// catalog's change log (changes.go), which replaces only the polls a
// change names. A poll id it does not hold is unknown: lookup answers from
// memory alone, with no query, so an absent poll and a hidden one answer
// in the same time and a request for any id costs PostgreSQL nothing. A
// poll created is known once the follower applied its change
// (milliseconds after the NOTIFY; at once at the intake whose admin route
// created it; within Config.CatalogRefresh if the notification was lost).
// While PostgreSQL does not answer, it serves what it holds as it is: a
// poll's opening and closing times are in it, so a poll that closes
// meanwhile still closes on time. Until its first load every lookup
// answers errPostgresDown.
type catalog struct {
	mu    sync.RWMutex
	polls map[string]*pollInfo // nil until the first load
}

// lookup returns the poll of id from memory, or ledger.ErrNotFound, or
// errPostgresDown before the catalog was ever loaded.
func (c *catalog) lookup(idBytes []byte) (*pollInfo, error) {
	c.mu.RLock()
	pi, ok := c.polls[string(idBytes)] // no string is made for an index
	loaded := c.polls != nil
	c.mu.RUnlock()
	switch {
	case ok:
		return pi, nil
	case !loaded:
		return nil, errPostgresDown
	}
	return nil, ledger.ErrNotFound
}

// loaded reports whether the catalog was loaded once.
func (c *catalog) loaded() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.polls != nil
}

// size is the number of polls held.
func (c *catalog) size() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.polls)
}

// replace makes polls the whole catalog.
func (c *catalog) replace(polls map[string]*pollInfo) {
	c.mu.Lock()
	c.polls = polls
	c.mu.Unlock()
}

// apply replaces the polls of ids with those of fresh, the polls of ids
// as PostgreSQL now holds them (a poll of ids not in fresh was deleted).
func (c *catalog) apply(ids []string, fresh []ledger.Poll) {
	infos := make([]*pollInfo, len(fresh))
	for i, p := range fresh {
		infos[i] = newPollInfo(p) // made before the lock: lookups do not wait for it
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		delete(c.polls, id)
	}
	for _, pi := range infos {
		c.polls[pi.poll.ID] = pi
	}
}
