package intake

import (
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"time"

	"tally/ledger"
	"tally/stream"
	"tally/vote"
)

// pollInfo is one poll as intake checks votes against it, with the enqueue
// script's arguments that depend on the poll and choice only, made once.
// A ballot of another kind than single is one of too many to make
// beforehand: its arguments are made per vote (answer). It holds only
// what the vote path and the reads of results and receipts read: every
// intake holds every poll, so a poll's bytes count a hundred thousand
// times (docs/operations.md, "The catalog in memory").
type pollInfo struct {
	// poll is the poll with its Rules made whole (Poll.BallotRules),
	// without its Eligible list, which list holds.
	poll  ledger.Poll
	idArg any // the poll id
	// choices are a single-choice poll's choices with their enqueue
	// arguments, sorted by answer (choice searches them); nil for the
	// other kinds, whose ballots are made per vote.
	choices []choice
	list    *eligibleList // nil unless the poll has an eligibility list
}

// eligibleList is the eligibility list of a poll, as it was when read.
type eligibleList struct {
	// open is the list of a poll open or scheduled when read: its
	// principal ids.
	open idSet
	// closed is whether the poll was closed when read; hashes is then its
	// list: the keyed hashes of its principal ids, sorted. No vote is
	// taken on it any longer, only reads of its results and receipts are:
	// 8 bytes a principal instead of its id. A hash of another id equal to
	// one of them (about one chance in 2^64 / its length, and the key is
	// this process's own, so that none can be chosen) would show that
	// principal the poll's results.
	closed bool
	hashes []uint64
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
	p.Eligible, p.Rules = nil, p.BallotRules()
	switch p.Eligibility { // the constants' bytes, not a copy read per poll
	case ledger.EligibleAny:
		p.Eligibility = ledger.EligibleAny
	case ledger.EligibleList:
		p.Eligibility = ledger.EligibleList
	}
	pi := &pollInfo{poll: p, idArg: p.ID}
	if p.Rules.Kind == vote.KindSingle {
		pi.choices = make([]choice, len(p.Choices))
		for i, c := range p.Choices {
			pi.choices[i] = choice{answer: c, recordArg: stream.Record(p.ID, c)}
		}
		slices.SortFunc(pi.choices, func(a, b choice) int { return strings.Compare(a.answer, b.answer) })
	}
	switch {
	case p.Eligibility != ledger.EligibleList:
	case p.State(now) == ledger.StateClosed:
		hashes := make([]uint64, len(eligible))
		for i, e := range eligible {
			hashes[i] = maphash.String(eligibleKey, e)
		}
		slices.Sort(hashes)
		pi.list = &eligibleList{closed: true, hashes: hashes}
	default:
		pi.list = &eligibleList{open: newIDSet(eligible)}
	}
	return pi
}

// choice returns the single-choice poll's choice c, or nil.
func (pi *pollInfo) choice(c []byte) *choice {
	lo, hi := 0, len(pi.choices)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if pi.choices[m].answer < string(c) { // no string is made for a comparison
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(pi.choices) && pi.choices[lo].answer == string(c) {
		return &pi.choices[lo]
	}
	return nil
}

// mayVote reports whether principalID may vote on the poll, and so see
// it, its results and its receipts.
func (pi *pollInfo) mayVote(principalID string) bool {
	l := pi.list
	switch {
	case pi.poll.Eligibility != ledger.EligibleList:
		return true
	case l == nil: // never made so: a list nobody is on
		return false
	case !l.closed:
		return l.open.has(principalID)
	}
	_, ok := slices.BinarySearch(l.hashes, maphash.String(eligibleKey, principalID))
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
