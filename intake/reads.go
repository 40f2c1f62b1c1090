package intake

import (
	"context"
	"errors"
	"fmt"
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
	id := r.PathValue("event_id")
	if !vote.ValidID(id) {
		writeProblem(w, http.StatusBadRequest, probBadID,
			fmt.Sprintf("event id %s is invalid: event ids are "+vote.IDRule, describeID(id)), 0)
		return
	}
	notFound := func() {
		writeProblem(w, http.StatusNotFound, probNotFound,
			fmt.Sprintf("your principal has no event %q: check the id, or send the vote again (the same event_id is safe to resend)", id), 0)
	}

	pgCtx, cancel := context.WithTimeout(r.Context(), s.cfg.PostgresTimeout)
	rec, err := s.store.Event(pgCtx, p.ID, id)
	cancel()
	switch {
	case err == nil:
		st := eventStatus{EventID: id, PollID: rec.PollID, CandidateID: rec.CandidateID, Status: string(rec.Status)}
		if rec.Status == ledger.StatusRejected {
			st.Reason = string(rec.Reason)
		}
		writeJSON(w, http.StatusOK, st)
		return
	case !errors.Is(err, ledger.ErrNotFound):
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

func (s *Server) handleResults(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.principal(w, r); !ok {
		return
	}
	id := r.PathValue("poll_id")
	if !vote.ValidID(id) {
		writeProblem(w, http.StatusBadRequest, probBadID,
			fmt.Sprintf("poll id %s is invalid: poll ids are "+vote.IDRule, describeID(id)), 0)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.PostgresTimeout)
	defer cancel()
	res, err := s.store.Results(ctx, id)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		writeProblem(w, http.StatusNotFound, probUnknownPoll, fmt.Sprintf("there is no poll %q: check the poll id", id), 0)
	case err != nil:
		s.failed(r, "results lookup failed", err)
		writeProblem(w, http.StatusServiceUnavailable, probUnavailable,
			"the ledger did not answer: retry after the Retry-After delay", time.Second)
	default:
		writeJSON(w, http.StatusOK, res)
	}
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readiness is the answer of /readyz.
type readiness struct {
	Status string            `json:"status"` // ready or not ready
	Checks map[string]string `json:"checks"` // "ok" or what is wrong
	Down   []string          `json:"down,omitempty"`
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	var mu sync.Mutex
	rd := readiness{Status: "ready", Checks: map[string]string{}}
	set := func(name string, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			rd.Checks[name] = "ok"
			return
		}
		rd.Checks[name] = err.Error()
		rd.Down = append(rd.Down, name)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.PostgresTimeout)
		defer cancel()
		set("postgres", s.store.Ping(ctx))
	})
	wg.Go(func() {
		// Through the breaker: once it lets a trial through, a ping that
		// succeeds closes it, so an instance that gets no votes while it
		// is not ready still becomes ready again.
		_, err := s.breaker.Execute(func() (any, error) {
			ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RedisTimeout)
			defer cancel()
			return nil, s.rdb.Ping(ctx).Err()
		})
		if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
			err = errors.New("not tried: the circuit breaker is open")
		}
		set("redis", err)
	})
	wg.Wait()
	if st := s.breaker.State(); st != gobreaker.StateClosed {
		set("redis_breaker", fmt.Errorf("%s: votes are refused until a trial request succeeds", st))
	} else {
		set("redis_breaker", nil)
	}
	if len(rd.Down) > 0 {
		slices.Sort(rd.Down)
		rd.Status = "not ready"
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, rd)
		return
	}
	writeJSON(w, http.StatusOK, rd)
}
