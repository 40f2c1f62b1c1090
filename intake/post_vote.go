package intake

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"tally/ledger"
	"tally/vote"
)

// This file owns the vote path, POST /v1/votes: handleVote and its steps
// in the order it calls them (readVote, admit, enqueue in enqueue.go,
// answerEnqueue; a known event's answer is known_status.go's), and the one table that maps each enqueue outcome to its
// answer.

// handleVote takes POST /v1/votes. Its deadline, Config.RequestTimeout
// after receivedAt, is not a context: a context with a timer per request
// costs more than a vote's own work. The lookups that can go to PostgreSQL
// (a token or poll not cached, the status of a replay, a refused vote's
// known event) bound themselves by it, and the batcher answers the enqueue
// by it. Each step answers its own refusals, except admit's: a vote admit
// refuses may be a known event, which answers as such (answerRefusal, in
// known_status.go), and a replay states the status the ledger knows
// (replayStatus).
func (s *Server) handleVote(w http.ResponseWriter, r *http.Request) {
	receivedAt := time.Now()
	deadline := receivedAt.Add(s.cfg.RequestTimeout)
	p, ok := s.principalBy(w, r, deadline)
	if !ok {
		return
	}
	buf := bodyBufs.Get().(*[maxBodyBytes + 1]byte)
	defer bodyBufs.Put(buf)
	v, ok := readVote(w, r, buf[:])
	if !ok {
		return
	}
	poll, c, ref := s.admit(r, p, &v, receivedAt, deadline)
	if ref.status == http.StatusBadRequest { // a ballot of the wrong shape: no known event has it
		writeProblem(w, ref.status, ref.problem, ref.detail, 0)
		return
	}
	if ref.status != 0 {
		s.answerRefusal(w, r, p, v, ref, deadline)
		return
	}
	start := time.Now()
	res, err := s.enqueue(r.Context(), p, v.eventID, poll, c, receivedAt, deadline)
	s.metrics.outcome(res.outcome).Observe(time.Since(start).Seconds())
	if res.outcome == outReplay && res.status == "" { // else the ledger already said
		res = s.replayStatus(r, p, v, res, deadline)
	}
	s.answerEnqueue(w, r, &v, res, err)
}

// refusal is the answer admit gives a vote it does not admit; status 0
// means admitted.
type refusal struct {
	status     int
	problem    problemType
	detail     string
	retryAfter time.Duration
}

// unknownPoll is the refusal of a poll that does not exist, and of one p
// may not vote on: what a principal may not see, it cannot learn exists.
func unknownPoll(pollID []byte) refusal {
	return refusal{http.StatusNotFound, probUnknownPoll,
		fmt.Sprintf("there is no poll %q: check the poll_id", pollID), 0}
}

// admit checks the vote of p against the catalog as of receivedAt: the
// poll exists, p may vote on it, the ballot has its kind's shape, the poll
// is open, and the ballot keeps its rules (a candidate is one of its
// choices). It sets v.answer to the ballot's canonical form, and returns
// the poll and the enqueue arguments of the answer, or the refusal: 404
// (an unknown poll, or one p may not vote on), 400 (a ballot of the wrong
// shape), 503 or 422. It answers nothing itself: a refused vote may still
// be a known event (answerRefusal).
func (s *Server) admit(r *http.Request, p *voter, v *voteBody, receivedAt, deadline time.Time) (*pollInfo, *choice, refusal) {
	if v.ballot != nil {
		v.answer = v.ballot // until it is read: no record holds it
	}
	poll, err := s.catalog.lookup(v.pollID)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return nil, nil, unknownPoll(v.pollID)
	case err != nil:
		s.failed(r, "poll lookup failed", err)
		return nil, nil, refusal{http.StatusServiceUnavailable, probNotQueued,
			"the poll could not be looked up because the database did not answer: retry after the Retry-After delay", time.Second}
	}
	var b vote.Ballot
	var shapeErr error
	if v.ballot != nil {
		if b, shapeErr = vote.ParseBallot(poll.poll.Rules.Kind, v.ballot); shapeErr == nil {
			v.answer = []byte(b.Canonical())
		}
	}
	if !poll.mayVote(p.ID) {
		return nil, nil, unknownPoll(v.pollID)
	}
	if shapeErr != nil {
		return nil, nil, refusal{http.StatusBadRequest, probBadRequest,
			fmt.Sprintf("the ballot does not fit poll %q, %s poll: %s", poll.poll.ID, poll.poll.Rules.Kind.A(), shapeErr), 0}
	}
	if !poll.poll.OpenAt(receivedAt) {
		detail := fmt.Sprintf("poll %q opens at %s: vote after that", poll.poll.ID, poll.poll.OpensAt.UTC().Format(time.RFC3339))
		if closes := poll.poll.ClosesAt; closes != nil && !receivedAt.Before(*closes) {
			detail = fmt.Sprintf("poll %q closed at %s and takes no more votes", poll.poll.ID, closes.UTC().Format(time.RFC3339))
		}
		return nil, nil, refusal{http.StatusUnprocessableEntity, probPollClosed, detail, 0}
	}
	if poll.poll.Rules.Kind == vote.KindSingle {
		c := poll.choice(v.answer)
		if c == nil {
			return nil, nil, refusal{http.StatusUnprocessableEntity, probInvalidChoice,
				fmt.Sprintf("%q is not a choice of poll %q: pick one of its choices", v.answer, poll.poll.ID), 0}
		}
		return poll, c, refusal{}
	}
	if v.ballot == nil {
		return nil, nil, refusal{http.StatusUnprocessableEntity, probInvalidBallot,
			fmt.Sprintf("poll %q is %s poll and takes a ballot of its kind instead of candidate_id: send \"ballot\": %s",
				poll.poll.ID, poll.poll.Rules.Kind.A(), vote.Shape(poll.poll.Rules.Kind)), 0}
	}
	if err := poll.poll.Rules.Check(poll.poll.Choices, b); err != nil {
		pt := probInvalidBallot
		var re *vote.RuleError
		if errors.As(err, &re) && re.Rule == vote.RuleUnknownChoice {
			pt = probInvalidChoice
		}
		return nil, nil, refusal{http.StatusUnprocessableEntity, pt,
			fmt.Sprintf("the ballot breaks a rule of poll %q: %s", poll.poll.ID, err), 0}
	}
	return poll, poll.answer(string(v.answer)), refusal{}
}

// enqueueAnswer is the answer to an enqueue outcome: 202, or a problem
// whose detail and Retry-After may name the vote, what enqueue found and
// the server's settings.
type enqueueAnswer struct {
	status     int
	problem    problemType
	detail     func(s *Server, eventID string, res enqueueResult) string
	retryAfter func(s *Server, res enqueueResult) time.Duration
}

// enqueueAnswers maps every outcome of enqueue to its answer.
var enqueueAnswers = map[outcome]enqueueAnswer{
	outAccepted: {status: http.StatusAccepted},
	outReplay:   {status: http.StatusAccepted},
	outConflict: {status: http.StatusConflict, problem: probKeyReused,
		detail: func(_ *Server, eventID string, _ enqueueResult) string {
			return fmt.Sprintf("event id %q was already used with another poll or ballot: use a new event id for a new vote", eventID)
		}},
	outLimited: {status: http.StatusTooManyRequests, problem: probRateLimited,
		detail: func(s *Server, _ string, _ enqueueResult) string {
			return fmt.Sprintf("your principal may enqueue %g votes per second with bursts of %d: retry after the Retry-After delay", s.cfg.Rate, s.cfg.Burst)
		},
		retryAfter: func(_ *Server, res enqueueResult) time.Duration { return res.wait }},
	outBacklog: {status: http.StatusServiceUnavailable, problem: probBacklog,
		detail:     fixedDetail("the queue of votes waiting to be counted is full: retry after the Retry-After delay"),
		retryAfter: func(s *Server, _ enqueueResult) time.Duration { return s.cfg.BacklogRetryAfter }},
	outUnconfirmed: {status: http.StatusServiceUnavailable, problem: probMaybeQueued,
		detail: func(s *Server, _ string, res enqueueResult) string {
			return fmt.Sprintf("the vote was written but only %d of %d Redis replicas confirmed it in time: retry the same request (same event_id) after the Retry-After delay", res.replicas, s.cfg.WaitReplicas)
		},
		retryAfter: oneSecond},
	outBreakerOpen: {status: http.StatusServiceUnavailable, problem: probNotQueued,
		detail:     fixedDetail("the queue (Redis) is failing and intake is not trying it for now: retry after the Retry-After delay"),
		retryAfter: func(s *Server, _ enqueueResult) time.Duration { return s.cfg.BreakerOpenFor }},
	outUnchecked: {status: http.StatusServiceUnavailable, problem: probNotQueued,
		detail: func(_ *Server, eventID string, _ enqueueResult) string {
			return fmt.Sprintf("intake could not check in time whether event id %q was already used, because the ledger (PostgreSQL) was slow to answer; the vote is not queued: retry the same request (same event_id) after the Retry-After delay", eventID)
		},
		retryAfter: oneSecond},
	outRedisError: {status: http.StatusServiceUnavailable, problem: probMaybeQueued,
		detail:     fixedDetail("the queue (Redis) did not answer; the vote may or may not be queued: retry the same request (same event_id) after the Retry-After delay"),
		retryAfter: oneSecond},
}

func fixedDetail(d string) func(*Server, string, enqueueResult) string {
	return func(*Server, string, enqueueResult) string { return d }
}

func oneSecond(*Server, enqueueResult) time.Duration { return time.Second }

// answerEnqueue answers the outcome of enqueue of v from enqueueAnswers,
// counts the outcomes that have a counter of their own, and logs a failed
// enqueue.
func (s *Server) answerEnqueue(w http.ResponseWriter, r *http.Request, v *voteBody, res enqueueResult, err error) {
	switch res.outcome {
	case outReplay:
		s.metrics.replays.Inc()
	case outLimited:
		s.metrics.rateLimited.Inc()
	case outBacklog:
		s.metrics.backlogRefusals.Inc()
	case outRedisError:
		s.failed(r, "enqueue failed", err)
	}
	a := enqueueAnswers[res.outcome]
	if a.status == http.StatusAccepted {
		writeAccepted(w, v, res.status)
		return
	}
	var retryAfter time.Duration
	if a.retryAfter != nil {
		retryAfter = a.retryAfter(s, res)
	}
	writeProblem(w, a.status, a.problem, a.detail(s, v.eventID, res), retryAfter)
}

// Header values every 202 shares, so a 202 allocates none. net/http only
// reads them (Header.Clone copies), and a slice of one value is full, so an
// Add to one of them copies it first.
var (
	headerJSON    = []string{"application/json"}
	headerNoStore = []string{"no-store"}
)

// acceptedBufs recycles the buffers 202 bodies are built in (net/http
// copies what is written), so a 202 allocates no body; acceptedBufSize
// holds one for the longest event id.
const acceptedBufSize = 96 + 2*vote.MaxIDLen

var acceptedBufs = sync.Pool{New: func() any { return new([acceptedBufSize]byte) }}

// writeAccepted answers 202 with
// {"event_id": ..., "status": ..., "status_url": "/v1/votes/{event_id}"},
// the status "pending" unless status says what is known. The event id is
// made of id characters only, and a status is a word, so neither needs
// escaping.
func writeAccepted(w http.ResponseWriter, v *voteBody, status ledger.Status) {
	if status == "" {
		status = ledger.StatusPending
	}
	eventID, url := v.eventID, v.statusURL
	if url == "" {
		url = routeVotes + "/" + eventID
	}
	h := w.Header()
	h["Location"] = []string{url}
	h["Content-Type"] = headerJSON
	h["Cache-Control"] = headerNoStore
	w.WriteHeader(http.StatusAccepted)
	buf := acceptedBufs.Get().(*[acceptedBufSize]byte)
	defer acceptedBufs.Put(buf)
	b := buf[:0]
	b = append(b, `{"event_id":"`...)
	b = append(b, eventID...)
	b = append(b, `","status":"`...)
	b = append(b, status...)
	b = append(b, `","status_url":"`...)
	b = append(b, url...)
	b = append(b, "\"}\n"...)
	w.Write(b)
}
