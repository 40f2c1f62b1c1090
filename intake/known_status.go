package intake

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"tally/ledger"
	"tally/stream"
)

// This file owns what intake answers for an event it already knows.
// Idempotency comes before admission: a vote admit refused is first looked
// up (its idempotency record in Redis, else the ledger), so that a known
// event answers as such whatever changed since it was accepted; and a
// replay states the status the ledger knows. Both are rare, so both may
// cost a round trip; the vote that admit accepts and the script enqueues
// costs none of them. (A new event id the script could not rule out is
// ledger_check.go's: its lookups share queries.)

// statusOf is the status GET /v1/votes/{event_id} answers for the ledger's
// record of an event: recorded or rejected.
func statusOf(rec ledger.EventRecord) ledger.Status { return rec.Status }

// samePayload reports whether the ledger's record was made with the poll
// and ballot of v (its canonical form, whatever its kind). The comparisons
// convert without allocating.
func samePayload(rec ledger.EventRecord, v voteBody) bool {
	return rec.PollID == string(v.pollID) && recordAnswer(rec) == string(v.answer)
}

// recordAnswer is the ballot of the ledger's record in canonical form: its
// candidate id for a single choice.
func recordAnswer(rec ledger.EventRecord) string {
	if rec.Ballot != "" {
		return rec.Ballot
	}
	return rec.CandidateID
}

// ledgerEvent reads the ledger's record of p's eventID, bounded by
// Config.PostgresTimeout and deadline.
func (s *Server) ledgerEvent(ctx context.Context, p *voter, eventID string, deadline time.Time) (ledger.EventRecord, error) {
	ctx, cancel := boundedContext(ctx, s.cfg.PostgresTimeout, deadline)
	defer cancel()
	return s.store.Event(ctx, p.ID, eventID)
}

// replayStatus gives res, a replay of the vote of p, the status the ledger
// knows of it, as GET /v1/votes/{event_id} would answer it. While the
// event is not in the ledger yet, or the ledger does not answer in time,
// res stays pending, which is still true. A ledger that holds the event id
// with another payload (the Redis record expired and the id was used again,
// or the ledger got it by import) makes res a conflict: the ledger decides,
// and it rejects this payload as key_reused.
func (s *Server) replayStatus(r *http.Request, p *voter, v voteBody, res enqueueResult, deadline time.Time) enqueueResult {
	rec, err := s.ledgerEvent(r.Context(), p, v.eventID, deadline)
	switch {
	case err == nil && samePayload(rec, v):
		res.status = statusOf(rec)
	case err == nil:
		res = enqueueResult{outcome: outConflict}
	case !errors.Is(err, ledger.ErrNotFound):
		s.failed(r, "status lookup of a replay failed; answered pending", err)
	}
	return res
}

// answerRefusal answers the vote of p that admit refused with ref, unless
// its event is known: when the idempotency record in Redis, or else the
// ledger, holds the event id with the same poll and ballot, it answers
// 202 as a replay does (with the status the ledger knows); with another
// payload, 409. Only when neither knows the event id does ref stand. A
// 404 (a poll that does not exist, or one p may not see) asks Redis only,
// never the ledger: an absent poll and a hidden one then cost the same
// and no query, so neither timing nor a flood of made-up ids reaches
// PostgreSQL; a retry of a vote on a poll p may no longer see answers 404
// once its record expired. When
// they could not tell (Redis or PostgreSQL did not answer), it answers
// 503: the event may be known, and a retry with the same event id is safe.
func (s *Server) answerRefusal(w http.ResponseWriter, r *http.Request, p *voter, v voteBody, ref refusal, deadline time.Time) {
	res, known, err := s.knownRecord(r.Context(), p, v, deadline)
	var what string
	switch {
	case err != nil:
		what = "the queue (Redis)"
	case known && res.outcome == outReplay:
		res = s.replayStatus(r, p, v, res, deadline)
	case !known && ref.status != http.StatusNotFound:
		rec, lerr := s.ledgerEvent(r.Context(), p, v.eventID, deadline)
		switch {
		case lerr == nil && samePayload(rec, v):
			res, known = enqueueResult{outcome: outReplay, status: statusOf(rec)}, true
		case lerr == nil:
			res, known = enqueueResult{outcome: outConflict}, true
		case !errors.Is(lerr, ledger.ErrNotFound):
			err, what = lerr, "the ledger (PostgreSQL)"
		}
	}
	switch {
	case err != nil && ref.status == http.StatusServiceUnavailable:
		writeProblem(w, ref.status, ref.problem, ref.detail, ref.retryAfter)
	case err != nil:
		s.failed(r, "known event lookup failed", err)
		writeProblem(w, http.StatusServiceUnavailable, probNotQueued, fmt.Sprintf(
			"intake could not check whether event id %q is already known because %s did not answer: retry the same request (same event_id) after the Retry-After delay",
			v.eventID, what), time.Second)
	case known:
		s.answerEnqueue(w, r, &v, res, nil)
	default:
		writeProblem(w, ref.status, ref.problem, ref.detail, ref.retryAfter)
	}
}

// knownRecord looks up the idempotency record of the vote of p (knownSrc,
// then WAIT with Config.WaitReplicas) through the breaker, bounded by the
// Redis timeout and deadline. known is false when there is no record;
// otherwise res is a replay (outUnconfirmed when WAIT did not confirm it)
// or a conflict.
func (s *Server) knownRecord(ctx context.Context, p *voter, v voteBody, deadline time.Time) (res enqueueResult, known bool, err error) {
	key := p.idempotencyKey(v.eventID)
	record := stream.Record(string(v.pollID), string(v.answer))
	timeout := s.cfg.RedisTimeout
	if s.cfg.WaitReplicas > 0 {
		timeout += s.cfg.WaitTimeout
	}
	_, err = s.breaker.Execute(func() (any, error) {
		ctx, cancel := boundedContext(ctx, timeout, deadline)
		defer cancel()
		rdb, err := s.batcher.waitClient(ctx, key)
		if err != nil {
			return nil, err
		}
		var look, wait *redis.Cmd
		// Each command carries its own error; look's comes first.
		_, _ = rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
			look = pl.Eval(ctx, knownSrc, []string{key}, record)
			if s.cfg.WaitReplicas > 0 {
				wait = pl.Do(ctx, "WAIT", s.cfg.WaitReplicas, s.cfg.WaitTimeout.Milliseconds())
			}
			return nil
		})
		n, lerr := look.Int64()
		switch {
		case lerr != nil:
			return nil, lerr
		case n == replyAccepted:
			return nil, nil
		case n == replyConflict:
			res, known = enqueueResult{outcome: outConflict}, true
			return nil, nil
		case n != replyReplay:
			return nil, fmt.Errorf("known-event script answered %d", n)
		}
		res, known = enqueueResult{outcome: outReplay}, true
		if wait != nil {
			var werr error
			if res.replicas, werr = wait.Int64(); werr != nil {
				return nil, fmt.Errorf("WAIT: %w", werr)
			}
			if res.replicas < int64(s.cfg.WaitReplicas) {
				res.outcome = outUnconfirmed
			}
		}
		return nil, nil
	})
	return res, known, err
}
