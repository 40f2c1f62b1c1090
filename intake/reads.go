package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"tally/ledger"
	"tally/vote"
)

// This file owns the read endpoints: GET /v1/votes/{event_id} (the
// ledger's answer, else the pending record in Redis), GET
// /v1/polls/{poll_id}/results, /healthz and /readyz.

// eventStatus is the answer of GET /v1/votes/{event_id}.
type eventStatus struct {
	EventID     string `json:"event_id"`
	PollID      string `json:"poll_id"`
	CandidateID string `json:"candidate_id"`
	Status      string `json:"status"`
	Reason      string `json:"reason,omitempty"`
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	p, ok := s.principal(w, r)
	if !ok {
		return
	}
	id, ok := pathID(w, r, "event_id", "event id")
	if !ok {
		return
	}
	notFound := func() {
		writeProblem(w, http.StatusNotFound, probNotFound,
			fmt.Sprintf("your principal has no event %q: check the id, or send the vote again (the same event_id is safe to resend)", id), 0)
	}

	pgCtx, cancel := context.WithTimeout(r.Context(), s.cfg.PostgresTimeout)
	rec, err := s.store.Event(pgCtx, p.ID, id)
	cancel()
	if err == nil {
		var st eventStatus
		if st, err = s.ledgerStatus(r.Context(), p, rec); err == nil {
			writeJSON(w, http.StatusOK, st)
			return
		}
	}
	if !errors.Is(err, ledger.ErrNotFound) {
		s.failed(r, "event lookup failed", err)
		writeProblem(w, http.StatusServiceUnavailable, probUnavailable,
			"the ledger did not answer: retry after the Retry-After delay", time.Second)
		return
	}

	var poll, cand string
	_, err = s.breaker.Execute(func() (any, error) {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RedisTimeout)
		defer cancel()
		var err error
		poll, cand, err = s.pendingRecord(ctx, s.keys.Idempotency(p.ID, id))
		return nil, err
	})
	if err != nil {
		s.failed(r, "pending lookup failed", err)
		writeProblem(w, http.StatusServiceUnavailable, probUnavailable,
			"the queue (Redis) did not answer: retry after the Retry-After delay", time.Second)
		return
	}
	if poll == "" {
		notFound()
		return
	}
	writeJSON(w, http.StatusOK, eventStatus{EventID: id, PollID: poll, CandidateID: cand, Status: string(ledger.StatusPending)})
}

// ledgerStatus is the answer for the ledger's record of p's own event.
func (s *Server) ledgerStatus(ctx context.Context, p *voter, rec ledger.EventRecord) (eventStatus, error) {
	st := eventStatus{EventID: rec.ClientEventID, PollID: rec.PollID, CandidateID: rec.CandidateID, Status: string(rec.Status)}
	if rec.Status != ledger.StatusRejected {
		return st, nil
	}
	reason, err := s.visibleReason(ctx, p, rec)
	st.Reason = string(reason)
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
	pi, err := s.catalog.lookup(ctx, []byte(rec.PollID), time.Time{})
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

// pendingRecord reads the poll and candidate of an idempotency record (see
// enqueueSrc), or "" when there is none.
func (s *Server) pendingRecord(ctx context.Context, key string) (poll, cand string, err error) {
	rec, err := s.rdb.Get(ctx, key).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return "", "", nil
	case err != nil:
		return "", "", err
	}
	poll, cand, _ = strings.Cut(rec, " ")
	return poll, cand, nil
}

// handleResults answers a poll's tallies. A principal outside a restricted
// poll's eligibility list gets the very answer of an unknown poll (status,
// problem type and detail), so it cannot learn that the poll exists.
func (s *Server) handleResults(w http.ResponseWriter, r *http.Request) {
	p, ok := s.principal(w, r)
	if !ok {
		return
	}
	id, ok := pathID(w, r, "poll_id", "poll id")
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.PostgresTimeout)
	defer cancel()
	pi, err := s.catalog.lookup(ctx, []byte(id), time.Time{})
	if err == nil && !pi.mayVote(p.ID) {
		err = ledger.ErrNotFound // not to be told apart from an unknown poll
	}
	var res ledger.Results
	if err == nil {
		res, err = s.store.Results(ctx, id)
	}
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		writeUnknownPoll(w, id)
	case err != nil:
		s.failed(r, "results lookup failed", err)
		writeProblem(w, http.StatusServiceUnavailable, probUnavailable,
			"the ledger did not answer: retry after the Retry-After delay", time.Second)
	default:
		writeJSON(w, http.StatusOK, res)
	}
}

// writeUnknownPoll answers 404 for a poll the caller may not know of: one
// that does not exist, or a restricted one it is not eligible for.
func writeUnknownPoll(w http.ResponseWriter, id string) {
	writeProblem(w, http.StatusNotFound, probUnknownPoll, fmt.Sprintf("there is no poll %q: check the poll id", id), 0)
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// The statuses of a /readyz check. None carries a driver's error: those
// name users, databases, hosts and ports, and go to the log instead.
const (
	checkOK          = "ok"
	checkUnreachable = "unreachable"  // did not answer, or answered an error
	checkBreakerOpen = "breaker_open" // intake's Redis breaker is not closed
	checkBacklogFull = "backlog_full" // a shard's stream holds Config.MaxBacklog entries
	checkUnknown     = "unknown"      // could not be read: Redis did not answer
)

// readiness is the answer of /readyz.
type readiness struct {
	Status string            `json:"status"` // ready, degraded or not ready
	Checks map[string]string `json:"checks"` // postgres, redis, backlog: a check status each
	Down   []string          `json:"down,omitempty"`
}

// handleReady answers /readyz with a status per check:
//
//   - postgres: ok or unreachable.
//   - redis: ok, unreachable, or breaker_open (votes are refused at once
//     until a trial succeeds; this check's ping is one).
//   - backlog: ok, backlog_full (a shard's stream holds Config.MaxBacklog
//     entries, so votes on it are answered 503 backlog-full), or unknown
//     while Redis does not answer.
//
// 503 "not ready" (with Retry-After) means take this instance out of
// rotation: PostgreSQL or Redis does not answer it, or its breaker is open,
// and another instance may well serve. A full backlog alone answers 200
// "degraded": the streams are shared by every intake, so another instance
// would refuse the same votes, and taking every instance out of rotation
// would turn a 503 with Retry-After into connection errors. A failed
// check's error goes to the log with the check's name.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	var pgErr, redisErr error
	backlog := checkUnknown
	var wg sync.WaitGroup
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.PostgresTimeout)
		defer cancel()
		pgErr = s.store.Ping(ctx)
	})
	wg.Go(func() {
		var full bool
		full, redisErr = s.readyRedis(r.Context())
		if redisErr == nil {
			backlog = checkOK
			if full {
				backlog = checkBacklogFull
			}
		}
	})
	wg.Wait()

	rd := readiness{Status: "ready", Checks: map[string]string{"postgres": checkOK, "redis": checkOK, "backlog": backlog}}
	if pgErr != nil {
		rd.Checks["postgres"] = checkUnreachable
		s.log.LogAttrs(r.Context(), slog.LevelWarn, "readiness check failed",
			slog.String("check", "postgres"), slog.String("error", pgErr.Error()))
	}
	switch {
	case errors.Is(redisErr, gobreaker.ErrOpenState) || errors.Is(redisErr, gobreaker.ErrTooManyRequests):
		rd.Checks["redis"] = checkBreakerOpen
	case redisErr != nil:
		rd.Checks["redis"] = checkUnreachable
		s.log.LogAttrs(r.Context(), slog.LevelWarn, "readiness check failed",
			slog.String("check", "redis"), slog.String("error", redisErr.Error()))
	case s.breaker.State() != gobreaker.StateClosed:
		rd.Checks["redis"] = checkBreakerOpen
	}
	for name, st := range rd.Checks {
		if st != checkOK {
			rd.Down = append(rd.Down, name)
		}
	}
	slices.Sort(rd.Down)
	if rd.Checks["postgres"] != checkOK || rd.Checks["redis"] != checkOK {
		rd.Status = "not ready"
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, rd)
		return
	}
	if backlog != checkOK {
		rd.Status = "degraded"
	}
	writeJSON(w, http.StatusOK, rd)
}

// readyRedis pings Redis and reads the length of every shard's stream (XLEN
// is O(1)) in one round trip, through the breaker: once the breaker lets a
// trial through, a check that succeeds closes it, so an instance that gets
// no votes while it is not ready still becomes ready again. full reports
// whether a shard holds Config.MaxBacklog entries, the length at which the
// enqueue script refuses votes.
func (s *Server) readyRedis(ctx context.Context) (full bool, err error) {
	_, err = s.breaker.Execute(func() (any, error) {
		ctx, cancel := context.WithTimeout(ctx, s.cfg.RedisTimeout)
		defer cancel()
		pipe := s.rdb.Pipeline()
		pipe.Ping(ctx)
		lens := make([]*redis.IntCmd, s.keys.Shards())
		for i := range lens {
			lens[i] = pipe.XLen(ctx, s.keys.Stream(i))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, err
		}
		for _, n := range lens {
			full = full || n.Val() >= s.cfg.MaxBacklog
		}
		return nil, nil
	})
	return full, err
}

// pathID reads the id in the path wildcard name, or answers 400 naming what
// it is (what: "event id", "poll id") and returns false.
func pathID(w http.ResponseWriter, r *http.Request, name, what string) (string, bool) {
	id := r.PathValue(name)
	if !vote.ValidID(id) {
		writeProblem(w, http.StatusBadRequest, probBadID,
			fmt.Sprintf("%s %s is invalid: %ss are "+vote.IDRule, what, describeID(id), what), 0)
		return "", false
	}
	return id, true
}
