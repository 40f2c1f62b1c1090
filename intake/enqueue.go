package intake

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"tally/stream"
)

// enqueueSrc is the one script a vote costs. All three keys carry the
// principal's shard hash tag.
//
//	KEYS[1] idempotency record (hash), KEYS[2] rate-limit bucket (string),
//	KEYS[3] the shard's stream
//	ARGV[1] payload fingerprint, ARGV[2] emission interval in microseconds
//	(1e6 / rate), ARGV[3] burst tolerance in microseconds, ARGV[4] record
//	lifetime in milliseconds, ARGV[5] max backlog, ARGV[6] poll,
//	ARGV[7] candidate, ARGV[8] received_at, ARGV[9...] the entry's
//	field/value pairs
//
// It answers {outcome, detail}:
//
//	replay    the same key with the same payload is known: detail is its
//	          stream id; nothing is enqueued (the record is touched so that
//	          a WAIT after it also covers the original write)
//	conflict  the same key is known with another payload; nothing changes
//	limited   the principal's rate is spent: detail is the wait in µs
//	backlog   the stream holds max backlog entries: detail is its length
//	accepted  XADDed: detail is the new stream id
//
// The rate limit is GCRA on Redis' clock: the bucket key holds the
// theoretical arrival time (µs) and expires once it is in the past. Only an
// accepted vote moves it.
const enqueueSrc = `
local fp = ARGV[1]
local known = redis.call('HMGET', KEYS[1], 'fp', 'id')
if known[1] then
  if known[1] == fp then
    redis.call('HINCRBY', KEYS[1], 'replays', 1)
    return {'replay', known[2]}
  end
  return {'conflict', ''}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local emission = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[2]) or '0')
if tat < now then tat = now end
local newTat = tat + emission
local allowAt = newTat - tonumber(ARGV[3])
if allowAt > now then
  return {'limited', string.format('%.0f', allowAt - now)}
end
local backlog = redis.call('XLEN', KEYS[3])
if backlog >= tonumber(ARGV[5]) then
  return {'backlog', tostring(backlog)}
end
local id = redis.call('XADD', KEYS[3], '*', unpack(ARGV, 9))
redis.call('HSET', KEYS[1], 'fp', fp, 'id', id, 'poll', ARGV[6], 'candidate', ARGV[7], 'received_at', ARGV[8])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('SET', KEYS[2], string.format('%.0f', newTat), 'PX', math.ceil((newTat - now) / 1000) + 1)
return {'accepted', id}
`

var enqueueScript = redis.NewScript(enqueueSrc)

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
)

// enqueueResult is the answer of the enqueue script.
type enqueueResult struct {
	outcome  outcome
	streamID string        // accepted, replay
	wait     time.Duration // limited
	backlog  int64         // backlog
	replicas int64         // acknowledged by WAIT, when asked
}

// enqueue runs the script for e, through the breaker. An error means Redis
// could not be asked or did not answer; the vote may or may not have been
// enqueued, and a retry with the same event id is safe.
func (s *Server) enqueue(ctx context.Context, e stream.Entry) (enqueueResult, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RedisTimeout+s.waitBudget())
	defer cancel()
	keys := []string{
		s.keys.Idempotency(e.PrincipalID, e.ClientEventID),
		s.keys.RateLimit(e.PrincipalID),
		s.keys.Stream(s.keys.ShardOf(e.PrincipalID)),
	}
	values := e.Values()
	args := make([]any, 0, 8+len(values))
	args = append(args, e.Fingerprint, s.emissionUS, s.toleranceUS, s.cfg.IdempotencyWindow.Milliseconds(),
		s.cfg.MaxBacklog, e.PollID, e.CandidateID, strconv.FormatInt(e.ReceivedAt.UnixMicro(), 10))
	for _, v := range values {
		args = append(args, v)
	}
	r, err := s.breaker.Execute(func() (any, error) {
		if s.cfg.WaitReplicas == 0 {
			res, err := enqueueScript.Run(ctx, s.rdb, keys, args...).Slice()
			if err != nil {
				return enqueueResult{}, fmt.Errorf("enqueue script: %w", err)
			}
			return decodeEnqueue(res)
		}
		return s.enqueueAndWait(ctx, keys, args)
	})
	if err != nil {
		return enqueueResult{}, err
	}
	return r.(enqueueResult), nil
}

// waitBudget is the extra time a vote may spend in WAIT.
func (s *Server) waitBudget() time.Duration {
	if s.cfg.WaitReplicas == 0 {
		return 0
	}
	return s.cfg.WaitTimeout
}

// enqueueAndWait runs the script and WAIT on one connection (a pipeline):
// WAIT counts the replicas that have every write of its connection.
func (s *Server) enqueueAndWait(ctx context.Context, keys []string, args []any) (enqueueResult, error) {
	run := func(eval func(redis.Pipeliner) *redis.Cmd) (*redis.Cmd, *redis.Cmd, error) {
		var script *redis.Cmd
		var wait *redis.Cmd
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			script = eval(p)
			wait = p.Do(ctx, "WAIT", s.cfg.WaitReplicas, s.cfg.WaitTimeout.Milliseconds())
			return nil
		})
		return script, wait, err
	}
	script, wait, err := run(func(p redis.Pipeliner) *redis.Cmd {
		return enqueueScript.EvalSha(ctx, p, keys, args...)
	})
	if err != nil && redis.HasErrorPrefix(script.Err(), "NOSCRIPT") {
		script, wait, err = run(func(p redis.Pipeliner) *redis.Cmd {
			return enqueueScript.Eval(ctx, p, keys, args...)
		})
	}
	if script != nil && script.Err() != nil {
		return enqueueResult{}, fmt.Errorf("enqueue script: %w", script.Err())
	}
	if err != nil {
		return enqueueResult{}, fmt.Errorf("enqueue script and WAIT: %w", err)
	}
	res, err := script.Slice()
	if err != nil {
		return enqueueResult{}, fmt.Errorf("enqueue script: %w", err)
	}
	r, err := decodeEnqueue(res)
	if err != nil {
		return r, err
	}
	r.replicas, err = wait.Int64()
	if err != nil {
		return enqueueResult{}, fmt.Errorf("WAIT: %w", err)
	}
	if (r.outcome == outAccepted || r.outcome == outReplay) && r.replicas < int64(s.cfg.WaitReplicas) {
		r.outcome = outUnconfirmed
	}
	return r, nil
}

func decodeEnqueue(res []any) (enqueueResult, error) {
	if len(res) != 2 {
		return enqueueResult{}, fmt.Errorf("enqueue script answered %d values, want 2", len(res))
	}
	kind, _ := res[0].(string)
	detail, _ := res[1].(string)
	switch kind {
	case "accepted":
		return enqueueResult{outcome: outAccepted, streamID: detail}, nil
	case "replay":
		return enqueueResult{outcome: outReplay, streamID: detail}, nil
	case "conflict":
		return enqueueResult{outcome: outConflict}, nil
	case "limited":
		us, err := strconv.ParseInt(detail, 10, 64)
		if err != nil {
			return enqueueResult{}, fmt.Errorf("enqueue script: wait %q: %w", detail, err)
		}
		return enqueueResult{outcome: outLimited, wait: time.Duration(us) * time.Microsecond}, nil
	case "backlog":
		n, _ := strconv.ParseInt(detail, 10, 64)
		return enqueueResult{outcome: outBacklog, backlog: n}, nil
	}
	return enqueueResult{}, fmt.Errorf("enqueue script answered %q", kind)
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
