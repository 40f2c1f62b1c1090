package intake

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"tally/ledger"
)

// This file owns the ledger check (Config.LedgerCheck), and this comment
// is where its rule is written; the others point here.
//
// Without it, an event id whose idempotency record Redis no longer holds
// (past Config.IdempotencyWindow, or lost with Redis' data) is enqueued as
// new, and the ledger decides it: an identical event already there is a
// duplicate, another payload is rejected key_reused, and neither is
// counted twice.
//
// With it, the ledger answers first. The enqueue script treats an absent
// record as proof that an event id is new only for a principal created
// since max(now - window, the shard's epoch, the time since which its
// Redis holds records); for any other it answers unsure. A principal older
// than the window is certain to need the ledger, so its votes ask the
// ledger before the script and run the script once. checkLedger asks the
// ledger, and ledgerChecks carries the lookups of concurrent votes to
// PostgreSQL in shared queries (ledger.Store.Events): a known id answers
// 202 with the ledger's status, or 409 for another payload; a new one runs
// the script again, told to skip the check. An ordinary new vote of a
// principal created since the cutoff never gets here and costs PostgreSQL
// nothing. When the ledger does not answer, the vote is enqueued all the
// same and the ledger decides it when it gets the entry, so votes keep
// being accepted while PostgreSQL is away; only a request whose own
// deadline passed during the lookup is answered 503 not-queued. No vote
// ever has a second effect. The check costs a share of a PostgreSQL query
// per vote of every principal older than the window, which is why it is
// off by default.

// The outcomes of a ledger check; they are the label of its counter.
const (
	checkNew      = "new"      // not in the ledger: enqueued
	checkReplay   = "replay"   // in the ledger with the same payload: 202
	checkConflict = "conflict" // in the ledger with another payload: 409
	checkError    = "error"    // the ledger did not answer (in time)
)

// checkOutcomes are the label values of the ledger check counter.
var checkOutcomes = []string{checkNew, checkReplay, checkConflict, checkError}

// checkLedger asks the ledger about the event id clientEventID of v, whose
// script answered unsure. known is true when the answer is decided: a
// replay with the ledger's status, a conflict, or outUnchecked when the
// request's deadline passed. Otherwise the vote is to be enqueued: the
// ledger does not hold the id, or it did not answer, in which case the
// ledger decides when it gets the entry (an identical event is a
// duplicate, another payload is rejected key_reused): while PostgreSQL is
// away votes keep being accepted, and none has a second effect.
func (s *Server) checkLedger(ctx context.Context, v *voter, clientEventID string, poll *pollInfo, c *choice, deadline time.Time) (res enqueueResult, known bool) {
	rep := s.checks.do(ctx, ledger.EventKey{PrincipalID: v.ID, ClientEventID: clientEventID}, deadline)
	switch {
	case rep.err != nil:
		s.metrics.ledgerChecks[checkError].Inc()
	case !rep.found:
		s.metrics.ledgerChecks[checkNew].Inc()
	case rep.rec.PollID == poll.poll.ID && recordAnswer(rep.rec) == c.answer:
		s.metrics.ledgerChecks[checkReplay].Inc()
		return enqueueResult{outcome: outReplay, status: statusOf(rep.rec)}, true
	default:
		s.metrics.ledgerChecks[checkConflict].Inc()
		return enqueueResult{outcome: outConflict}, true
	}
	if !time.Now().Before(deadline) {
		return enqueueResult{outcome: outUnchecked}, true
	}
	return enqueueResult{}, false
}

// Bounds of ledgerChecks: a query carries at most checkBatch keys, and at
// most checkQueries are under way at once, leaving the pool's other
// connections to authentication and the catalog.
const (
	checkBatch   = 1000
	checkQueries = 2
)

// ledgerChecks sends the ledger lookups of concurrent votes in shared
// queries, the way the batcher sends their scripts: there is no timer, a
// lookup that finds a free query slot goes at once, and lookups that
// arrive while queries are under way share the next one. The first caller
// that finds fewer than checkQueries under way becomes a leader and sends
// what is pending until nothing is; once its own lookup is answered it
// hands what is left to a new goroutine.
type ledgerChecks struct {
	store   *ledger.Store
	timeout time.Duration // bound on one query
	log     *slog.Logger

	mu      sync.Mutex
	pending []*checkCall
	leaders int
}

// checkCall is one lookup waiting in ledgerChecks.
type checkCall struct {
	key      ledger.EventKey
	deadline time.Time
	done     chan checkReply // buffered; one answer
}

// checkReply is the ledger's answer to one checkCall.
type checkReply struct {
	rec   ledger.EventRecord
	found bool
	err   error
}

func newLedgerChecks(store *ledger.Store, cfg Config, log *slog.Logger) *ledgerChecks {
	return &ledgerChecks{store: store, timeout: cfg.PostgresTimeout, log: log}
}

// errCheckDeadline answers a lookup whose request deadline passed before a
// query could carry it.
var errCheckDeadline = fmt.Errorf("no ledger lookup within the request deadline: %w", context.DeadlineExceeded)

// do looks key up in the ledger, sharing a query with the lookups of
// concurrent votes, and answers by deadline or Config.PostgresTimeout
// after its query started, whichever comes first. ctx gives values only.
func (l *ledgerChecks) do(ctx context.Context, key ledger.EventKey, deadline time.Time) checkReply {
	if !time.Now().Before(deadline) {
		return checkReply{err: errCheckDeadline}
	}
	c := &checkCall{key: key, deadline: deadline, done: make(chan checkReply, 1)}
	l.mu.Lock()
	l.pending = append(l.pending, c)
	lead := l.leaders < checkQueries
	if lead {
		l.leaders++
	}
	l.mu.Unlock()
	if lead {
		l.lead(context.WithoutCancel(ctx), c)
	}
	return <-c.done
}

// lead sends pending lookups until none is left, or until own is answered.
func (l *ledgerChecks) lead(ctx context.Context, own *checkCall) {
	for {
		l.mu.Lock()
		if len(l.pending) == 0 {
			l.leaders--
			l.mu.Unlock()
			return
		}
		if own != nil && len(own.done) > 0 {
			l.mu.Unlock()
			go l.lead(ctx, nil)
			return
		}
		now := time.Now()
		batch := make([]*checkCall, 0, min(len(l.pending), checkBatch))
		i := 0
		for ; i < len(l.pending) && len(batch) < checkBatch; i++ {
			if c := l.pending[i]; now.Before(c.deadline) {
				batch = append(batch, c)
			} else {
				c.done <- checkReply{err: errCheckDeadline}
			}
		}
		rest := copy(l.pending, l.pending[i:])
		clear(l.pending[rest:])
		l.pending = l.pending[:rest]
		l.mu.Unlock()
		if len(batch) > 0 {
			l.query(ctx, batch)
		}
	}
}

// query looks up batch in one query, bounded by the timeout and the
// earliest deadline of its lookups, and answers each.
func (l *ledgerChecks) query(ctx context.Context, batch []*checkCall) {
	deadline := time.Now().Add(l.timeout)
	keys := make([]ledger.EventKey, len(batch))
	for i, c := range batch {
		keys[i] = c.key
		if c.deadline.Before(deadline) {
			deadline = c.deadline
		}
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	found, err := l.store.Events(ctx, keys)
	if err != nil {
		l.log.LogAttrs(ctx, slog.LevelWarn, "ledger check of new event ids failed; their votes are enqueued and the ledger decides them",
			slog.Int("lookups", len(batch)), slog.String("error", err.Error()))
	}
	for _, c := range batch {
		rec, ok := found[c.key]
		c.done <- checkReply{rec: rec, found: ok, err: err}
	}
}
