package intake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"tally/audit"
	"tally/intake/internal/problem"
	"tally/ledger"
	"tally/vote"
)

// This file owns the read endpoints: GET /v1/votes/{event_id} (the
// ledger's answer with a recorded vote's receipt, else the pending record
// in Redis) and GET /v1/polls/{poll_id}/results. /healthz and /readyz are
// health.go's.

// eventStatus is the answer of GET /v1/votes/{event_id}: a single choice
// shows its candidate_id, a ballot of any other kind its canonical form as
// a JSON value under ballot.
type eventStatus struct {
	EventID     string          `json:"event_id"`
	PollID      string          `json:"poll_id"`
	CandidateID string          `json:"candidate_id,omitempty"`
	Ballot      json.RawMessage `json:"ballot,omitempty"`
	Status      string          `json:"status"`
	Reason      string          `json:"reason,omitempty"`
	// SupersededBy is, for a superseded ballot, the event id of the
	// principal's ballot that counts now.
	SupersededBy string `json:"superseded_by,omitempty"`
	// Receipt is a recorded (or superseded) vote's inclusion proof, once a signed
	// checkpoint covers it (see receipt).
	Receipt *audit.Receipt `json:"receipt,omitempty"`
}

// handleStatus answers the caller's own event: the ledger's record, else
// pending while its idempotency record in Redis shows it was accepted. When
// the ledger does not answer, pending is only said of an event accepted
// after PostgreSQL stopped answering (so no projector can have applied it
// since); of an older one intake cannot tell whether it was counted, and
// answers 503.
func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	p, ok := s.principal(w, r)
	if !ok {
		return
	}
	id, ok := problem.PathID(w, r, "event_id", "event id")
	if !ok {
		return
	}
	rec, err := s.statusEvent(r.Context(), p, id)
	if err == nil {
		st, err := s.ledgerStatus(r.Context(), p, rec)
		if err != nil {
			s.ledgerFailed(w, r, "poll, checkpoint or proof lookup of an event failed", err)
			return
		}
		writeJSON(w, http.StatusOK, st)
		return
	}
	ledgerDown := !errors.Is(err, ledger.ErrNotFound)
	if ledgerDown && !errors.Is(err, errPostgresDown) {
		s.failed(r, "event lookup failed", err)
	}

	var qr queueRecord
	_, err = s.breaker.Execute(func() (any, error) {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RedisTimeout)
		defer cancel()
		var err error
		qr, err = s.pendingRecord(ctx, s.keys.Idempotency(p.ID, id))
		return nil, err
	})
	now := time.Now()
	switch {
	case err != nil:
		s.failed(r, "pending lookup failed", err)
		writeProblem(w, http.StatusServiceUnavailable, probUnavailable,
			"the queue (Redis) did not answer: retry after the Retry-After delay", time.Second)
	case qr.poll == "" && ledgerDown:
		writeLedgerDown(w)
	case qr.poll == "":
		writeProblem(w, http.StatusNotFound, probNotFound,
			fmt.Sprintf("your principal has no event %q: check the id, or send the vote again (the same event_id is safe to resend)", id), 0)
	case ledgerDown && !s.pg.acceptedSinceDown(s.cfg.IdempotencyWindow-qr.ttl, now):
		writeLedgerDown(w)
	default:
		if ledgerDown {
			s.metrics.pendingFromQueue.Inc()
		}
		st := eventStatus{EventID: id, PollID: qr.poll, Status: string(ledger.StatusPending)}
		st.setAnswer(qr.cand)
		writeJSON(w, http.StatusOK, st)
	}
}

// setAnswer shows answer, a ballot in canonical form: a candidate id as
// candidate_id, any other (compact JSON, see vote.Ballot.Canonical) as the
// JSON value of ballot.
func (st *eventStatus) setAnswer(answer string) {
	if vote.ValidID(answer) || !json.Valid([]byte(answer)) {
		st.CandidateID = answer
		return
	}
	st.Ballot = json.RawMessage(answer)
}

// statusEvent reads the ledger's record of p's event id, unless PostgreSQL
// is not to be tried now (see pgState).
func (s *Server) statusEvent(ctx context.Context, p *voter, id string) (ledger.EventRecord, error) {
	if s.pg.skip(time.Now()) {
		return ledger.EventRecord{}, errPostgresDown
	}
	lctx, cancel := context.WithTimeout(ctx, s.cfg.PostgresTimeout)
	defer cancel()
	rec, err := s.store.Event(lctx, p.ID, id)
	s.pg.observe(ctx, err)
	return rec, err
}

// writeLedgerDown answers 503: the ledger did not answer, and nothing else
// intake knows tells the answer.
func writeLedgerDown(w http.ResponseWriter) {
	writeProblem(w, http.StatusServiceUnavailable, probUnavailable,
		"the ledger (PostgreSQL) did not answer: retry after the Retry-After delay", time.Second)
}

// ledgerStatus is the answer for the ledger's record of p's own event:
// with its receipt when it is recorded, its visible reason when rejected.
func (s *Server) ledgerStatus(ctx context.Context, p *voter, rec ledger.EventRecord) (eventStatus, error) {
	st := eventStatus{EventID: rec.ClientEventID, PollID: rec.PollID, Status: string(rec.Status)}
	st.setAnswer(recordAnswer(rec))
	var err error
	switch rec.Status {
	case ledger.StatusRecorded:
		st.Receipt, err = s.receipt(ctx, p, rec)
	case ledger.StatusSuperseded:
		// Its leaf stays in the log: its receipt still proves it is there.
		st.SupersededBy = rec.SupersededBy
		st.Receipt, err = s.receipt(ctx, p, rec)
	case ledger.StatusRejected:
		var reason ledger.Reason
		reason, err = s.visibleReason(ctx, p, rec)
		st.Reason = string(reason)
	}
	return st, err
}

// visibleReason is the reason the rejection rec of p's own event reads
// with. To a principal outside a restricted poll's eligibility list it
// reads unknown_poll, as an event on a poll that does not exist does:
// otherwise the ledger's order of checks (poll_closed and invalid_choice
// come before not_eligible) would tell it that the poll exists and more.
// key_reused is about the event id, decided before any poll check, and
// stays as it is. A vote p had recorded while eligible stays visible to it
// as it is: it is p's own, and p learned of the poll while eligible.
func (s *Server) visibleReason(ctx context.Context, p *voter, rec ledger.EventRecord) (ledger.Reason, error) {
	if rec.Reason == ledger.ReasonKeyReused || rec.Reason == ledger.ReasonUnknownPoll {
		return rec.Reason, nil
	}
	pi, err := s.catalog.lookup([]byte(rec.PollID))
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return ledger.ReasonUnknownPoll, nil
	case err != nil:
		return "", err
	case !pi.mayVote(p.ID):
		return ledger.ReasonUnknownPoll, nil
	}
	return rec.Reason, nil
}

// queueRecord is an idempotency record (see enqueueSrc): the poll and
// ballot (canonical: the candidate id of a single choice) of an accepted
// event, and the lifetime it has left.
type queueRecord struct {
	poll, cand string // "" when there is none
	ttl        time.Duration
}

// pendingRecord reads the idempotency record of key and its lifetime left,
// in one transaction. The record was written with Config.IdempotencyWindow
// to live and keeps it when rewritten, so the window less its lifetime
// left is how long ago the event was accepted.
func (s *Server) pendingRecord(ctx context.Context, key string) (queueRecord, error) {
	var get *redis.StringCmd
	var ttl *redis.DurationCmd
	_, err := s.rdb.TxPipelined(ctx, func(pl redis.Pipeliner) error {
		get = pl.Get(ctx, key)
		ttl = pl.PTTL(ctx, key)
		return nil
	})
	rec, gerr := get.Result()
	switch {
	case errors.Is(gerr, redis.Nil):
		return queueRecord{}, nil
	case gerr != nil:
		return queueRecord{}, gerr
	case err != nil:
		return queueRecord{}, err
	}
	var qr queueRecord
	qr.poll, qr.cand, _ = strings.Cut(rec, " ")
	qr.ttl = ttl.Val()
	return qr, nil
}

// resultsAnswer is the answer of GET /v1/polls/{poll_id}/results. Stale
// marks figures read before PostgreSQL stopped answering; their as_of says
// when.
type resultsAnswer struct {
	ledger.Results
	Stale bool `json:"stale,omitempty"`
}

// handleResults answers a poll's tallies, read at most once per
// Config.ReadCacheTTL per poll (concurrent reads share one query). While
// PostgreSQL does not answer, it answers the last figures intake read,
// marked stale, or 503 when it read none. A principal outside a
// restricted poll's eligibility list gets the very answer of an unknown
// poll (status, problem type and detail), so it cannot learn that the
// poll exists, whether the figures come from PostgreSQL or from the cache.
// A poll whose results are public is answered without a token too (as its
// live page and stream are); without one, any other poll, known or not,
// gets the 401 of a missing token.
func (s *Server) handleResults(w http.ResponseWriter, r *http.Request) {
	if len(r.Header["Authorization"]) == 0 && s.publicResults(w, r) {
		return
	}
	p, ok := s.principal(w, r)
	if !ok {
		return
	}
	id, ok := problem.PathID(w, r, "poll_id", "poll id")
	if !ok {
		return
	}
	pi, err := s.catalog.lookup([]byte(id))
	if err == nil && !pi.mayVote(p.ID) {
		err = ledger.ErrNotFound // not to be told apart from an unknown poll
	}
	var res resultsAnswer
	if err == nil {
		res, err = s.pollResults(r.Context(), id)
	}
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		problem.WriteUnknownPoll(w, id)
	case err != nil:
		if !errors.Is(err, errPostgresDown) {
			s.failed(r, "results lookup failed", err)
		}
		writeLedgerDown(w)
	default:
		writeJSON(w, http.StatusOK, res)
	}
}

// publicResults answers the results of the request's poll, and returns
// true, when the poll's results are public; otherwise it answers nothing.
func (s *Server) publicResults(w http.ResponseWriter, r *http.Request) bool {
	id := r.PathValue("poll_id")
	if !vote.ValidID(id) {
		return false
	}
	pi, err := s.catalog.lookup([]byte(id))
	if err != nil || !pi.poll.PublicResults {
		return false
	}
	res, err := s.pollResults(r.Context(), id)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		problem.WriteUnknownPoll(w, id)
	case err != nil:
		if !errors.Is(err, errPostgresDown) {
			s.failed(r, "results lookup failed", err)
		}
		writeLedgerDown(w)
	default:
		writeJSON(w, http.StatusOK, res)
	}
	return true
}

// resultsCache holds the last figures intake read of each poll. It holds
// no more polls than the catalog does: results are only read for a poll
// the catalog holds.
type resultsCache struct {
	group singleflight.Group

	mu   sync.Mutex
	last map[string]resultsRead // poll id -> the last figures read

	now func() time.Time // time.Now; a test's clock moves past the TTL at once
}

// resultsRead is a poll's figures and when intake read them.
type resultsRead struct {
	res  ledger.Results
	read time.Time
}

func newResultsCache() *resultsCache {
	return &resultsCache{last: map[string]resultsRead{}, now: time.Now}
}

func (c *resultsCache) get(id string) (resultsRead, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rr, ok := c.last[id]
	return rr, ok
}

func (c *resultsCache) put(id string, rr resultsRead) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last[id] = rr
}

// pollResults is the figures of poll id: read within Config.ReadCacheTTL,
// else read now (one query for every read of the poll waiting on it), else,
// when PostgreSQL does not answer, the last read, stale.
func (s *Server) pollResults(ctx context.Context, id string) (resultsAnswer, error) {
	last, held := s.results.get(id)
	if held && s.results.now().Sub(last.read) < s.cfg.ReadCacheTTL {
		return resultsAnswer{Results: last.res}, nil
	}
	var err error
	if s.pg.skip(time.Now()) {
		err = errPostgresDown
	} else {
		var v any
		v, err, _ = s.results.group.Do(id, func() (any, error) {
			// Shared by every read waiting: no one reader's cancellation
			// may end it.
			qctx := context.WithoutCancel(ctx)
			lctx, cancel := context.WithTimeout(qctx, s.cfg.PostgresTimeout)
			defer cancel()
			s.metrics.resultsReads.Inc()
			res, err := s.store.Results(lctx, id)
			s.pg.observe(qctx, err)
			if err == nil {
				s.results.put(id, resultsRead{res: res, read: s.results.now()})
			}
			return res, err
		})
		if err == nil {
			return resultsAnswer{Results: v.(ledger.Results)}, nil
		}
	}
	if errors.Is(err, ledger.ErrNotFound) || !held {
		return resultsAnswer{}, err
	}
	s.metrics.staleResults.Inc()
	return resultsAnswer{Results: last.res, Stale: true}, nil
}
