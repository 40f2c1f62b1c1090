package ledger

// This file holds what a Store knows, in memory, of who has a ballot in
// each poll of answers latest it appends to (voterBook), so that an
// append reads the ballot that a principal's new one replaces only for a
// principal that may have one (readLatest, ballots_latest.go): most
// ballots of such a poll are their principal's first, and the index probe
// that finds none cost about as much as the one that finds the old
// ballot (BENCHMARKS.md).
//
// For each poll the book keeps a size and a filter: every principal with
// a row among the first size leaves of the poll's log is in the filter (a
// Bloom filter: it may answer yes for a principal that has none, which
// costs a probe, never no for one that has one). An append that finds a
// principal not in the filter reads nothing for it, and checks under the
// poll's head that the log's first leaves since size are all explained:
// each append of this Store numbers its rows under the head and, before
// it commits, notes them here as a span (the leaves it added, the log's
// root before and after, and its principals, which also go into the
// filter). Walking back from the head it holds (size and root) through
// spans whose roots match proves which rows the log got since size, and
// so which of its principals got a row there: only those are read again.
// A root names every leaf before it, so a span noted by an append that
// then rolled back never matches a head, unless its leaves were written
// after all (the same batch run again), and then its principals are the
// right ones. Leaves no span explains (another Store's or process's
// append, a definition) make the append read all of that poll's
// principals again, and the book forgets the poll and loads it again
// from the ledger later; after maxVoterFailures such times it stops
// keeping that poll (appends to it then read every principal, as with
// several projectors on one poll).
//
// The walk ends only at the book's own size and root, and a root names
// every leaf before it, so a log that shrank or was written again since
// the book read it (a database restored under a running projector) is
// never taken for the one it knew.

import (
	"context"
	"hash/maphash"
	"math/bits"
	"sync"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/tlog"
)

const (
	// maxVoterSpans bounds the spans kept per poll: a span is needed only
	// until the appends that were in flight beside it have checked their
	// heads.
	maxVoterSpans = 64
	// maxVoterFailures is how many times a poll's log may grow by leaves
	// no span explains before the book stops keeping the poll.
	maxVoterFailures = 3
	// voterReloadWait is how many appends to a poll read every principal
	// after its first failure before the book loads it again; it doubles
	// with each failure.
	voterReloadWait = 16
)

// voterBook is a Store's knowledge of who has a ballot in the polls of
// answers latest it appends to.
type voterBook struct {
	mu    sync.Mutex
	seed  maphash.Seed
	polls map[string]*pollVoters
}

// pollVoters is the book's page of one poll.
type pollVoters struct {
	loaded bool
	epoch  int // counts loads and failures, so a base from before either proves nothing
	size   int64
	root   tlog.Hash
	filter principalFilter
	spans  []voterSpan
	// Without a load: how many appends still read every principal before
	// the next load, and how many times the log grew unexplained.
	wait, failures int
}

// voterSpan is the leaves [from, to) one append of the Store numbered in
// a poll's log, the log's roots before and after them, and the
// principals of its rows.
type voterSpan struct {
	from, to         int64
	fromRoot, toRoot tlog.Hash
	principals       []string
}

// voterBase is what an append's read relied on for a poll: the book's
// size and root at the time, in the epoch of its page.
type voterBase struct {
	size  int64
	root  tlog.Hash
	epoch int
}

// plan says, for each of polls, whether the book knows its voters: base
// for those it does, load for those to load now. A poll in neither reads
// every principal.
func (b *voterBook) plan(polls []string) (base map[string]voterBase, load []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.polls == nil {
		b.polls, b.seed = map[string]*pollVoters{}, maphash.MakeSeed()
	}
	base = map[string]voterBase{}
	for _, p := range polls {
		pv := b.polls[p]
		switch {
		case pv == nil:
			b.polls[p] = &pollVoters{}
			load = append(load, p)
		case pv.loaded:
			base[p] = voterBase{size: pv.size, root: pv.root, epoch: pv.epoch}
		case pv.failures >= maxVoterFailures:
		case pv.wait > 0:
			pv.wait--
		default:
			load = append(load, p)
		}
	}
	return base, load
}

// loadVotersSQL reads each poll's log size and root and the principals
// with a row of the poll, in one snapshot: every committed row of a poll
// whose log is built is one of its leaves, so these are the principals of
// the log's first size leaves (and the reading append's own rows, which
// the filter may hold too).
const loadVotersSQL = `
SELECT h.poll_id, h.size, h.root,
       ARRAY(SELECT DISTINCT e.principal_id FROM poll_events e WHERE e.latest AND e.poll_id = h.poll_id)
FROM poll_log_heads h WHERE h.poll_id = ANY($1::text[]) AND h.root IS NOT NULL`

// load reads polls' voters from the ledger into the book, and returns
// the base of each it loaded. A poll whose log is still to build is not
// loaded, and counts as a failure.
func (b *voterBook) load(ctx context.Context, tx pgx.Tx, polls []string) (map[string]voterBase, error) {
	rows, err := tx.Query(ctx, loadVotersSQL, polls)
	if err != nil {
		return nil, interpretError("append batch: read the voters of polls of answers latest", err)
	}
	out := map[string]voterBase{}
	var (
		poll       string
		size       int64
		root       []byte
		principals []string
	)
	_, err = pgx.ForEachRow(rows, []any{&poll, &size, &root, &principals}, func() error {
		if len(root) == hashSize {
			out[poll] = b.install(poll, size, tlog.Hash(root), principals)
		}
		return nil
	})
	if err != nil {
		return nil, interpretError("append batch: read the voters of polls of answers latest", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range polls {
		if _, ok := out[p]; !ok {
			b.failLocked(p)
		}
	}
	return out, nil
}

// install makes poll's page the one a load read; the principals of the
// spans it keeps go into the new filter too.
func (b *voterBook) install(poll string, size int64, root tlog.Hash, principals []string) voterBase {
	b.mu.Lock()
	defer b.mu.Unlock()
	pv := b.polls[poll]
	if pv == nil {
		pv = &pollVoters{}
		b.polls[poll] = pv
	}
	pv.loaded, pv.size, pv.root = true, size, root
	pv.epoch++
	pv.filter = principalFilter{seed: b.seed}
	for _, p := range principals {
		pv.filter.add(p)
	}
	for _, s := range pv.spans {
		for _, p := range s.principals {
			pv.filter.add(p)
		}
	}
	return voterBase{size: size, root: root, epoch: pv.epoch}
}

// mayHave reports, for each (poll, principal) of an append whose poll
// has a base, whether the principal may have a row in the poll: no means
// none among the log's first base.size leaves.
func (b *voterBook) mayHave(pps []pollPrincipal) []bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]bool, len(pps))
	for i, pp := range pps {
		pv := b.polls[pp.poll]
		out[i] = pv == nil || !pv.loaded || pv.filter.has(pp.principal)
	}
	return out
}

// note records an append's span of a poll's log, under the poll's head
// and before the append commits.
func (b *voterBook) note(poll string, s voterSpan) {
	b.mu.Lock()
	defer b.mu.Unlock()
	pv := b.polls[poll]
	if pv == nil || pv.failures >= maxVoterFailures {
		return
	}
	for i, old := range pv.spans {
		if old.to == s.to && old.toRoot == s.toRoot {
			pv.spans = append(pv.spans[:i], pv.spans[i+1:]...)
			break
		}
	}
	if len(pv.spans) == maxVoterSpans {
		pv.spans = pv.spans[1:]
	}
	pv.spans = append(pv.spans, s)
	if pv.loaded {
		for _, p := range s.principals {
			pv.filter.add(p)
		}
	}
}

// prove walks back from the head an append holds (at, atRoot) through
// the noted spans to base, and returns the principals of the rows the log
// got between them. Where it cannot, it returns ok false and the book
// forgets the poll.
func (b *voterBook) prove(poll string, base voterBase, at int64, atRoot tlog.Hash) (between map[string]bool, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	pv := b.polls[poll]
	if pv == nil || pv.epoch != base.epoch {
		return nil, false
	}
	between = map[string]bool{}
	for at != base.size || atRoot != base.root {
		if at <= base.size {
			b.failLocked(poll)
			return nil, false
		}
		i := pv.spanTo(at, atRoot)
		if i < 0 {
			b.failLocked(poll)
			return nil, false
		}
		for _, p := range pv.spans[i].principals {
			between[p] = true
		}
		at, atRoot = pv.spans[i].from, pv.spans[i].fromRoot
	}
	return between, true
}

// spanTo is the index of the span that ends at (to, root), or -1.
func (pv *pollVoters) spanTo(to int64, root tlog.Hash) int {
	for i := len(pv.spans) - 1; i >= 0; i-- {
		if pv.spans[i].to == to && pv.spans[i].toRoot == root {
			return i
		}
	}
	return -1
}

// advance moves poll's size to the end of a span an append committed,
// when the append proved every leaf between its base and its span.
func (b *voterBook) advance(poll string, epoch int, to int64, root tlog.Hash) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if pv := b.polls[poll]; pv != nil && pv.loaded && pv.epoch == epoch && to > pv.size {
		pv.size, pv.root = to, root
	}
}

// failLocked forgets poll's voters: the log grew by leaves no span
// explains, or cannot be loaded. b.mu is held.
func (b *voterBook) failLocked(poll string) {
	pv := b.polls[poll]
	if pv == nil {
		return
	}
	pv.loaded, pv.filter = false, principalFilter{}
	pv.epoch++
	pv.wait = voterReloadWait << pv.failures
	pv.failures++
	if pv.failures >= maxVoterFailures {
		pv.spans = nil
	}
}

// principalFilter is a Bloom filter of principal ids that grows as it
// fills: a layer of four times the capacity is added when the last is
// full (a poll of a million principals has seven). A layer has at least
// bloomBitsPer bits a principal, rounded up to a power of two (16 in
// fact), and bloomHashes hashes: under one in a thousand principals it
// does not hold reads as held, in each full layer.
type principalFilter struct {
	seed   maphash.Seed
	layers []bloomLayer
}

type bloomLayer struct {
	bits []uint64
	mask uint64 // the number of bits, a power of two, less one
	n    int
	cap  int
}

const (
	bloomFirstCap = 1 << 8
	bloomBitsPer  = 10
	bloomHashes   = 7
)

func (f *principalFilter) add(p string) {
	h := maphash.String(f.seed, p)
	if f.hasHash(h) {
		return
	}
	if len(f.layers) == 0 || f.layers[len(f.layers)-1].n == f.layers[len(f.layers)-1].cap {
		c := bloomFirstCap << (2 * len(f.layers))
		m := uint64(1) << bits.Len64(uint64(c*bloomBitsPer-1))
		f.layers = append(f.layers, bloomLayer{bits: make([]uint64, m/64), mask: m - 1, cap: c})
	}
	l := &f.layers[len(f.layers)-1]
	h1, h2 := bloomPair(h)
	for i := range uint64(bloomHashes) {
		bit := (h1 + i*h2) & l.mask
		l.bits[bit/64] |= 1 << (bit % 64)
	}
	l.n++
}

func (f *principalFilter) has(p string) bool {
	return len(f.layers) > 0 && f.hasHash(maphash.String(f.seed, p))
}

func (f *principalFilter) hasHash(h uint64) bool {
	h1, h2 := bloomPair(h)
	for j := range f.layers {
		l := &f.layers[j]
		in := true
		for i := range uint64(bloomHashes) {
			bit := (h1 + i*h2) & l.mask
			if l.bits[bit/64]&(1<<(bit%64)) == 0 {
				in = false
				break
			}
		}
		if in {
			return true
		}
	}
	return false
}

// bloomPair is the two hashes a principal's bits are drawn from (h1 +
// i*h2); h2 is odd, so that its bits in a layer are distinct.
func bloomPair(h uint64) (uint64, uint64) { return h, (h>>32 | h<<32) | 1 }
