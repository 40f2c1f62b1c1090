package intake

import (
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"tally/ledger"
	"tally/stream"
	"tally/vote"
)

// pollInfo is one poll as intake checks votes against it, with the enqueue
// script's arguments that depend on the poll and choice only, made once.
// A ballot of another kind than single is one of too many to make
// beforehand: its arguments are made per vote (answer).
type pollInfo struct {
	poll    ledger.Poll // without its Eligible list, which eligible holds
	rules   vote.Rules  // poll.BallotRules()
	idArg   any         // the poll id
	choices map[string]*choice
	// eligible is the eligibility list of a poll of ledger.EligibleList
	// that was open when it was read: its principal ids.
	eligible map[string]struct{}
	// closedEligible is that of a poll closed when it was read: the keyed
	// hashes of its principal ids, sorted. No vote is taken on it any
	// longer, only reads of its results and receipts are: 8 bytes a
	// principal instead of its id and a map entry. A hash of another id
	// equal to one of them (about one chance in 2^64 / its length, and
	// the key is this process's own, so that none can be chosen) would
	// show that principal the poll's results.
	closedEligible []uint64
}

// eligibleKey keys the hashes of closed polls' eligibility lists.
var eligibleKey = maphash.MakeSeed()

// choice is the enqueue script's arguments of one answer to a poll: a
// choice of a single-choice poll, or a ballot in canonical form.
type choice struct {
	answer    string // the candidate id, or the canonical ballot
	recordArg any    // its idempotency record, stream.Record of the poll and answer
}

// answer is the enqueue arguments of a ballot of the poll in canonical
// form, made for this vote.
func (pi *pollInfo) answer(canonical string) *choice {
	return &choice{answer: canonical, recordArg: stream.Record(pi.poll.ID, canonical)}
}

// newPollInfo is p as intake holds it, read at now.
func newPollInfo(p ledger.Poll, now time.Time) *pollInfo {
	eligible := p.Eligible
	p.Eligible = nil
	pi := &pollInfo{poll: p, rules: p.BallotRules(), idArg: p.ID, choices: make(map[string]*choice, len(p.Choices))}
	for _, c := range p.Choices {
		pi.choices[c] = &choice{answer: c, recordArg: stream.Record(p.ID, c)}
	}
	switch {
	case p.Eligibility != ledger.EligibleList:
	case p.State(now) == ledger.StateClosed:
		pi.closedEligible = make([]uint64, len(eligible))
		for i, e := range eligible {
			pi.closedEligible[i] = maphash.String(eligibleKey, e)
		}
		slices.Sort(pi.closedEligible)
	default:
		pi.eligible = make(map[string]struct{}, len(eligible))
		for _, e := range eligible {
			pi.eligible[e] = struct{}{}
		}
	}
	return pi
}

// choice returns the poll's choice c, or nil.
func (pi *pollInfo) choice(c []byte) *choice { return pi.choices[string(c)] }

// mayVote reports whether principalID may vote on the poll, and so see
// it, its results and its receipts.
func (pi *pollInfo) mayVote(principalID string) bool {
	switch {
	case pi.poll.Eligibility != ledger.EligibleList:
		return true
	case pi.eligible != nil:
		_, ok := pi.eligible[principalID]
		return ok
	}
	_, ok := slices.BinarySearch(pi.closedEligible, maphash.String(eligibleKey, principalID))
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
	now := time.Now()
	for i, p := range fresh {
		infos[i] = newPollInfo(p, now) // made before the lock: lookups do not wait for it
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
