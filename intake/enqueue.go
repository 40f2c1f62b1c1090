package intake

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"tally/ledger"
)

// This file owns the enqueue step of a vote: it runs the vote's script
// through the circuit breaker and the batcher, with Config.LedgerCheck asks
// the ledger when the script could not tell whether the event id is new
// (ledger_check.go), and turns the reply (and WAIT's count) into an
// outcome.

// outcome is what enqueue did with one vote; it is also a metric label.
type outcome string

const (
	outAccepted    outcome = "accepted"
	outReplay      outcome = "replay"
	outConflict    outcome = "conflict"
	outLimited     outcome = "rate_limited"
	outBacklog     outcome = "backlog"
	outUnconfirmed outcome = "unconfirmed"  // WAIT did not confirm
	outBreakerOpen outcome = "breaker_open" // Redis not tried
	outRedisError  outcome = "redis_error"
	// outUnchecked: the script could not tell whether the event id is
	// new, and the request's deadline passed while the ledger was asked.
	outUnchecked outcome = "unchecked"
	// outUnsure is the script's answer that the ledger must be asked
	// (replyUnsure); enqueue never returns it.
	outUnsure outcome = "unsure"
)

// outcomes are all the outcomes enqueue returns, in the order of the
// constants.
var outcomes = []outcome{outAccepted, outReplay, outConflict, outLimited, outBacklog, outUnconfirmed, outBreakerOpen, outRedisError, outUnchecked}

// enqueueResult is what enqueue made of one vote.
type enqueueResult struct {
	outcome  outcome
	wait     time.Duration // outLimited: the rate is spent for that long
	replicas int64         // acknowledged by WAIT, when asked
	// status is what the ledger knows of a replayed event (outReplay);
	// "" is pending.
	status ledger.Status
}

// enqueue runs the script for the vote of v with clientEventID for choice c
// of poll, through the breaker and the batcher, and answers its outcome.
// The script answers a replay or a conflict of an event id whose record
// Redis holds; an id it holds no record of is enqueued, and the ledger
// decides it: an identical event already there is a duplicate, another
// payload is rejected key_reused, and neither is counted again. So a new
// vote costs Redis one share of a round trip and PostgreSQL nothing.
//
// With Config.LedgerCheck, when the script cannot tell whether the event
// id is new, the ledger is asked first (ledger_check.go).
//
// An error means Redis could not be asked (outBreakerOpen) or did not
// answer (outRedisError); the vote may or may not have been enqueued, and
// a retry with the same event id is safe.
func (s *Server) enqueue(ctx context.Context, v *voter, clientEventID string, poll *pollInfo, c *choice, receivedAt, deadline time.Time) (enqueueResult, error) {
	if !s.cfg.LedgerCheck {
		return s.runScript(ctx, s.script.call(v, clientEventID, poll, c, receivedAt, false), deadline)
	}
	if !s.olderThanWindow(v, receivedAt) {
		res, err := s.runScript(ctx, s.script.call(v, clientEventID, poll, c, receivedAt, true), deadline)
		if err != nil || res.outcome != outUnsure {
			return res, err
		}
	}
	if res, known := s.checkLedger(ctx, v, clientEventID, poll, c, deadline); known {
		return res, nil
	}
	// The ledger does not hold the id (or did not answer): the script
	// still finds a record of it, if Redis has one, and answers a replay.
	return s.runScript(ctx, s.script.call(v, clientEventID, poll, c, receivedAt, false), deadline)
}

// olderThanWindow reports that v was created more than the idempotency
// window before receivedAt, by intake's clock. The script's cutoff (on
// Redis' clock) is never earlier than that, so for such a principal it
// would answer unsure for any id it holds no record of. Clocks that
// disagree cost at most a needless ledger lookup or a script run that
// answers unsure, as before.
func (s *Server) olderThanWindow(v *voter, receivedAt time.Time) bool {
	return v.CreatedAt.Before(receivedAt.Add(-s.cfg.IdempotencyWindow))
}

// runScript runs call, a vote's script, through the breaker and the
// batcher, and decodes its answer.
func (s *Server) runScript(ctx context.Context, call *scriptCall, deadline time.Time) (enqueueResult, error) {
	var res enqueueResult
	_, err := s.breaker.Execute(func() (any, error) {
		rep := s.batcher.do(ctx, call, deadline)
		if rep.err != nil {
			if isReplyError(rep.err) && strings.Contains(rep.err.Error(), "syntax error") {
				return nil, fmt.Errorf("intake needs Redis 7.0 or later (this one refused the script's SET ... NX GET): %w", rep.err)
			}
			return nil, rep.err
		}
		var err error
		res, err = decodeEnqueue(rep.res)
		if err != nil {
			return nil, err
		}
		if s.cfg.WaitReplicas > 0 && (res.outcome == outAccepted || res.outcome == outReplay) {
			if rep.waitErr != nil {
				return nil, fmt.Errorf("WAIT: %w", rep.waitErr)
			}
			res.replicas = rep.replicas
			if res.replicas < int64(s.cfg.WaitReplicas) {
				res.outcome = outUnconfirmed
			}
		}
		return nil, nil
	})
	switch {
	case errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests):
		return enqueueResult{outcome: outBreakerOpen}, err
	case err != nil:
		return enqueueResult{outcome: outRedisError}, err
	}
	return res, nil
}

// isReplyError reports an error Redis answered (as opposed to a failed
// connection).
func isReplyError(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}

// newBreaker opens after cfg.BreakerFailures consecutive Redis failures and
// lets one trial request through after cfg.BreakerOpenFor. A reply error
// (the script refused something) proves Redis is there, unless it says
// Redis cannot serve; a request its client gave up on counts for nothing.
func newBreaker(cfg Config, onChange func(from, to gobreaker.State)) *gobreaker.CircuitBreaker[any] {
	return gobreaker.NewCircuitBreaker[any](gobreaker.Settings{
		Name:        "redis",
		MaxRequests: 1,
		Timeout:     cfg.BreakerOpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.ConsecutiveFailures >= uint32(cfg.BreakerFailures)
		},
		IsSuccessful: func(err error) bool {
			if err == nil || errors.Is(err, redis.Nil) {
				return true
			}
			var rerr redis.Error
			if errors.As(err, &rerr) {
				msg := rerr.Error()
				for _, down := range []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY", "NOREPLICAS"} {
					if strings.HasPrefix(msg, down) {
						return false
					}
				}
				return true
			}
			return false
		},
		IsExcluded: func(err error) bool { return errors.Is(err, context.Canceled) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			if onChange != nil {
				onChange(from, to)
			}
		},
	})
}
