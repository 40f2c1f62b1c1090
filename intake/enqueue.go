package intake

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"tally/stream"
)

// enqueueSrc is the one script a vote costs. All three keys carry the
// principal's shard hash tag.
//
//	KEYS[1] idempotency record (string), KEYS[2] rate-limit bucket (string),
//	KEYS[3] the shard's stream
//	ARGV[1] emission interval in microseconds (1e6 / rate), ARGV[2] burst
//	tolerance in microseconds, ARGV[3] record lifetime in milliseconds,
//	ARGV[4] max backlog, ARGV[5] principal, ARGV[6] client event id,
//	ARGV[7] poll, ARGV[8] candidate, ARGV[9] payload fingerprint,
//	ARGV[10] received_at (µs since the epoch)
//
// It answers a small integer, which go-redis reads without allocating, or
// a pair for the rare refusals:
//
//	0 (replyAccepted)            XADDed
//	1 (replyReplay)              the same key with the same payload is
//	                             known; nothing is enqueued (the record is
//	                             rewritten as it is, so that a WAIT after it
//	                             also covers the original write)
//	2 (replyConflict)            the same key is known with another
//	                             payload; nothing changes
//	{3 (replyLimited), µs}       the principal's rate is spent for that long
//	{4 (replyBacklog), length}   the stream holds max backlog entries
//
// The idempotency record is a string, "poll candidate", written with its
// lifetime by the same SET NX that looks it up: one call where a hash took
// three. A vote that is then refused deletes it again, within the script,
// so nobody ever sees it. A record of the previous version of this script
// is a hash (fields fp, id, poll, candidate, received_at, replays); the
// SET answers WRONGTYPE for it and the script compares its fingerprint
// instead. Such records are gone one Config.IdempotencyWindow after the
// upgrade, and that branch with them.
//
// The rate limit is GCRA on Redis' clock: the bucket key holds the
// theoretical arrival time (µs) and expires once it is in the past. Only an
// accepted vote moves it.
//
// The XADD's fields are the stream package's encoding (see xaddFields).
var enqueueSrc = `
local record = ARGV[7] .. ' ' .. ARGV[8]
local known = redis.pcall('SET', KEYS[1], record, 'NX', 'GET', 'PX', ARGV[3])
if known then
  if type(known) == 'table' then
    if not string.find(known.err or '', '^WRONGTYPE') then
      return known
    end
    if redis.call('HGET', KEYS[1], 'fp') == ARGV[9] then
      redis.call('HINCRBY', KEYS[1], 'replays', 1)
      return 1
    end
    return 2
  end
  if known == record then
    redis.call('SET', KEYS[1], known, 'KEEPTTL')
    return 1
  end
  return 2
end
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local tat = tonumber(redis.call('GET', KEYS[2])) or now
if tat < now then tat = now end
local newTat = tat + ARGV[1]
local allowAt = newTat - ARGV[2]
if allowAt > now then
  redis.call('DEL', KEYS[1])
  return {3, math.ceil(allowAt - now)}
end
local backlog = redis.call('XLEN', KEYS[3])
if backlog >= tonumber(ARGV[4]) then
  redis.call('DEL', KEYS[1])
  return {4, backlog}
end
redis.call('XADD', KEYS[3], '*', ` + xaddFields() + `)
redis.call('SET', KEYS[2], newTat, 'PX', math.ceil((newTat - now) / 1000) + 1)
return 0
`

// The script's answers (see enqueueSrc).
const (
	replyAccepted = 0
	replyReplay   = 1
	replyConflict = 2
	replyLimited  = 3
	replyBacklog  = 4
)

// The script's arguments (ARGV indexes) that carry an entry's values.
const (
	argPrincipal   = 5
	argEventID     = 6
	argPoll        = 7
	argCandidate   = 8
	argFingerprint = 9
	argReceivedAt  = 10
)

// xaddFields is the field/value list of the script's XADD: the fields of
// stream.Entry.Values in its order, each value the script argument that
// carries it, the version the literal the stream package writes. It panics
// when the stream package has a field the script does not carry, which
// every test of intake would show.
func xaddFields() string {
	argOf := map[string]int{
		stream.FieldPrincipal:   argPrincipal,
		stream.FieldEventID:     argEventID,
		stream.FieldPoll:        argPoll,
		stream.FieldCandidate:   argCandidate,
		stream.FieldFingerprint: argFingerprint,
		stream.FieldReceivedAt:  argReceivedAt,
	}
	pairs := stream.Entry{}.Values()
	var b strings.Builder
	for i := 0; i < len(pairs); i += 2 {
		if i > 0 {
			b.WriteString(", ")
		}
		field := pairs[i]
		if field == stream.FieldVersion {
			fmt.Fprintf(&b, "%q, %q", field, pairs[i+1])
			continue
		}
		n, ok := argOf[field]
		if !ok {
			panic(fmt.Sprintf("intake: the enqueue script does not carry stream field %q", field))
		}
		fmt.Fprintf(&b, "%q, ARGV[%d]", field, n)
	}
	return b.String()
}

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
	wait     time.Duration // limited
	backlog  int64         // backlog
	replicas int64         // acknowledged by WAIT, when asked
}

// enqueueSHA is the script's SHA1, boxed once.
var enqueueSHA any = enqueueScript.Hash()

// enqueue runs the script for the vote of v with clientEventID for choice c
// of poll, through the breaker and the batcher. An error means Redis could
// not be asked or did not answer; the vote may or may not have been
// enqueued, and a retry with the same event id is safe.
//
// The command is built here whole in a recycled call, from arguments boxed
// once per voter, poll and choice where they can be, and pointers into the
// call for the others (go-redis writes a *string or *int64 as its value):
// a vote allocates its idempotency key and the command.
func (s *Server) enqueue(ctx context.Context, v *voter, clientEventID string, poll *pollInfo, c *choice, receivedAt, deadline time.Time) (enqueueResult, error) {
	call := calls.Get().(*scriptCall)
	call.key = v.idempotencyKey(s.keys, clientEventID)
	call.eventID = clientEventID
	call.receivedAt = receivedAt.UnixMicro()
	args := append(call.argBuf[:0], "evalsha", enqueueSHA, 3, &call.key, v.rateKeyArg, s.streamKeyArgs[v.shard])
	args = append(args, s.scriptConsts[:]...)
	call.args = append(args, v.idArg, &call.eventID, poll.idArg, c.idArg, c.fingerprintArg, &call.receivedAt)
	var res enqueueResult
	_, err := s.breaker.Execute(func() (any, error) {
		rep := s.batcher.do(ctx, call, deadline)
		if rep.err != nil {
			if isReplyError(rep.err) && strings.Contains(rep.err.Error(), "syntax error") {
				return nil, fmt.Errorf("Redis refused the script's SET ... NX GET: intake needs Redis 7.0 or later: %w", rep.err)
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
	if err != nil {
		return enqueueResult{}, err
	}
	return res, nil
}

// batcher sends the enqueue scripts of concurrent requests to Redis in
// pipelines. Each vote is still one script and one round trip, but votes
// that arrive while a round trip is under way share the next one, which
// spares both sides a write and a read per vote. There is no timer: a vote
// that finds a free pipeline goes at once.
//
// It runs no goroutine of its own. The first caller that finds fewer than
// maxInFlight pipelines under way becomes a leader: it sends what is
// pending, up to maxBatch at a time, until nothing is pending; once its own
// vote is answered it hands what is left to a new goroutine that ends when
// nothing is pending.
type batcher struct {
	rdb          redis.UniversalClient
	timeout      time.Duration // bound on one pipeline
	maxBatch     int
	maxInFlight  int
	waitReplicas int
	waitTimeout  time.Duration
	batchSize    prometheus.Histogram

	mu       sync.Mutex
	pending  []*scriptCall
	leaders  int
	flying   [][]*scriptCall // the batches under way
	watch    *time.Timer     // runs expire
	watching bool            // watch is set
}

type scriptCall struct {
	args    []any // the whole EVALSHA command, in argBuf
	argBuf  [6 + argReceivedAt]any
	key     string // the idempotency key, &key in args
	eventID string // &eventID in args
	// receivedAt is received_at (µs), &receivedAt in args.
	receivedAt int64
	deadline   time.Time        // answered by then
	done       chan scriptReply // buffered; one answer
	answered   atomic.Bool      // done has had its answer
}

type scriptReply struct {
	res      any
	err      error
	replicas int64 // acknowledged by WAIT, when asked
	waitErr  error
	// expiredInFlight: expire answered it while its pipeline held it.
	expiredInFlight bool
}

func newBatcher(rdb redis.UniversalClient, cfg Config, batchSize prometheus.Histogram) *batcher {
	timeout := cfg.RedisTimeout
	if cfg.WaitReplicas > 0 {
		timeout += cfg.WaitTimeout
	}
	b := &batcher{
		rdb: rdb, timeout: timeout, maxBatch: cfg.EnqueueBatch, maxInFlight: cfg.EnqueuePipelines,
		waitReplicas: cfg.WaitReplicas, waitTimeout: cfg.WaitTimeout, batchSize: batchSize,
	}
	b.watch = time.AfterFunc(time.Hour, b.expire)
	b.watch.Stop()
	return b
}

// calls recycles the scriptCalls whose answer was received.
var calls = sync.Pool{New: func() any { return &scriptCall{done: make(chan scriptReply, 1)} }}

// errDeadline answers a vote whose deadline passed before Redis answered
// it; the breaker counts it as a failure, as any Redis that does not answer
// in time.
var errDeadline = fmt.Errorf("no answer from Redis within the request deadline: %w", context.DeadlineExceeded)

// do runs the script command of c (EVALSHA sha 3 keys... args...), a
// call from the calls pool, and waits for its answer, at the latest until
// deadline: the batcher bounds each vote itself, with one timer for all,
// so a request needs no context and timer of its own. A vote still pending
// at its deadline is never sent; one under way is answered errDeadline all
// the same, and its pipeline's context ends at the earliest deadline of its
// votes. ctx gives values only: a client that goes away does not withdraw
// its vote. c goes back to the pool unless a pipeline still holds it.
func (b *batcher) do(ctx context.Context, c *scriptCall, deadline time.Time) scriptReply {
	if !time.Now().Before(deadline) {
		c.recycle()
		return scriptReply{err: errDeadline}
	}
	c.deadline = deadline
	c.answered.Store(false)
	b.mu.Lock()
	b.pending = append(b.pending, c)
	if !b.watching {
		b.watching = true
		b.watch.Reset(time.Until(deadline))
	}
	lead := b.leaders < b.maxInFlight
	if lead {
		b.leaders++
	}
	b.mu.Unlock()
	if lead {
		b.lead(context.WithoutCancel(ctx), c)
	}
	r := <-c.done
	if !r.expiredInFlight { // else its pipeline still holds it
		c.recycle()
	}
	return r
}

func (c *scriptCall) recycle() {
	c.args = nil
	clear(c.argBuf[:])
	calls.Put(c)
}

// answer gives c its reply, unless it has one already (expire and send
// may race for a vote under way).
func answer(c *scriptCall, r scriptReply) {
	if c.answered.CompareAndSwap(false, true) {
		c.done <- r
	}
}

// expire answers errDeadline to the votes, pending or under way, whose
// deadline passed, and sets the watch timer for the earliest deadline of
// the others. The timer runs only while votes wait, and is set again only
// once it fired: votes mostly come in deadline order, so one timer serves
// them all, and a vote costs no timer of its own.
func (b *batcher) expire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	var next time.Time
	soonest := func(c *scriptCall) {
		if next.IsZero() || c.deadline.Before(next) {
			next = c.deadline
		}
	}
	kept := b.pending[:0]
	for _, c := range b.pending {
		if !now.Before(c.deadline) {
			answer(c, scriptReply{err: errDeadline})
			continue
		}
		soonest(c)
		kept = append(kept, c)
	}
	clear(b.pending[len(kept):])
	b.pending = kept
	for _, batch := range b.flying {
		for _, c := range batch {
			switch {
			case c.answered.Load():
			case !now.Before(c.deadline):
				answer(c, scriptReply{err: errDeadline, expiredInFlight: true})
			default:
				soonest(c)
			}
		}
	}
	b.watching = !next.IsZero()
	if b.watching {
		b.watch.Reset(next.Sub(now))
	}
}

// lead sends pending batches until none is left, or until own is answered.
func (b *batcher) lead(ctx context.Context, own *scriptCall) {
	var sent []*scriptCall
	for {
		b.mu.Lock()
		if sent != nil {
			i := slices.IndexFunc(b.flying, func(f []*scriptCall) bool { return &f[0] == &sent[0] })
			b.flying = slices.Delete(b.flying, i, i+1)
			sent = nil
		}
		if len(b.pending) == 0 {
			b.leaders--
			b.mu.Unlock()
			return
		}
		if own != nil && len(own.done) > 0 {
			b.mu.Unlock()
			go b.lead(ctx, nil)
			return
		}
		now := time.Now()
		batch := make([]*scriptCall, 0, min(len(b.pending), b.maxBatch))
		i := 0
		for ; i < len(b.pending) && len(batch) < b.maxBatch; i++ {
			if c := b.pending[i]; now.Before(c.deadline) {
				batch = append(batch, c)
			} else {
				answer(c, scriptReply{err: errDeadline})
			}
		}
		rest := copy(b.pending, b.pending[i:])
		clear(b.pending[rest:])
		b.pending = b.pending[:rest]
		if len(batch) == 0 {
			b.mu.Unlock()
			continue
		}
		b.flying = append(b.flying, batch)
		b.mu.Unlock()
		b.send(ctx, batch)
		sent = batch
	}
}

// send runs one pipeline: the batch's scripts (EVALSHA, loading the script
// once when Redis does not know it) and, with waitReplicas, one WAIT that
// covers every write of the pipeline's connection.
func (b *batcher) send(ctx context.Context, batch []*scriptCall) {
	b.batchSize.Observe(float64(len(batch)))
	deadline := time.Now().Add(b.timeout)
	for _, c := range batch {
		if c.deadline.Before(deadline) {
			deadline = c.deadline
		}
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	cmds, wait, err := b.pipeline(ctx, batch)
	if err != nil && redis.HasErrorPrefix(cmds[0].Err(), "NOSCRIPT") {
		// A script error has no effect, so the whole batch may go again.
		if lerr := enqueueScript.Load(ctx, b.rdb).Err(); lerr == nil {
			cmds, wait, err = b.pipeline(ctx, batch)
		}
	}
	rep := scriptReply{}
	if wait != nil {
		rep.replicas, rep.waitErr = wait.Int64()
	}
	for i, c := range batch {
		r := rep
		r.res, r.err = cmds[i].Result()
		if r.err == nil && err != nil && !isReplyError(err) {
			r.err = err
		}
		answer(c, r)
	}
}

func (b *batcher) pipeline(ctx context.Context, batch []*scriptCall) ([]*redis.Cmd, *redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(batch))
	var wait *redis.Cmd
	_, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range batch {
			cmd := redis.NewCmd(ctx, c.args...)
			cmd.SetFirstKeyPos(3) // for a cluster client: KEYS[1] routes it
			p.Process(ctx, cmd)
			cmds[i] = cmd
		}
		if b.waitReplicas > 0 {
			wait = p.Do(ctx, "WAIT", b.waitReplicas, b.waitTimeout.Milliseconds())
		}
		return nil
	})
	return cmds, wait, err
}

// isReplyError reports an error Redis answered (as opposed to a failed
// connection).
func isReplyError(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}

// decodeEnqueue reads the answer of the enqueue script.
func decodeEnqueue(res any) (enqueueResult, error) {
	switch v := res.(type) {
	case int64:
		switch v {
		case replyAccepted:
			return enqueueResult{outcome: outAccepted}, nil
		case replyReplay:
			return enqueueResult{outcome: outReplay}, nil
		case replyConflict:
			return enqueueResult{outcome: outConflict}, nil
		}
	case []any:
		if len(v) != 2 {
			break
		}
		kind, _ := v[0].(int64)
		n, ok := v[1].(int64)
		if !ok {
			break
		}
		switch kind {
		case replyLimited:
			return enqueueResult{outcome: outLimited, wait: time.Duration(n) * time.Microsecond}, nil
		case replyBacklog:
			return enqueueResult{outcome: outBacklog, backlog: n}, nil
		}
	}
	return enqueueResult{}, fmt.Errorf("enqueue script answered %v", res)
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
