package intake

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// This file owns the pipelining batcher: it sends the scripts of concurrent
// votes to Redis in shared pipelines and answers each vote by its deadline.
// How a pipeline goes to Redis is batcher_send.go's; what a script says and
// how its command is laid out is script.go's.

// batcher sends the votes of concurrent requests to Redis in pipelines.
// Votes that arrive while a round trip is under way share the next one,
// in one call of the enqueue script per shard, which spares both sides a
// write, a read and a script call per vote. There is no timer: a vote that
// finds a free pipeline goes at once.
//
// It runs no goroutine of its own. The first caller that finds fewer than
// maxInFlight pipelines under way becomes a leader: it sends what is
// pending, up to maxBatch at a time, until nothing is pending; once its own
// vote is answered it hands what is left to a new goroutine that ends when
// nothing is pending.
type batcher struct {
	rdb redis.UniversalClient
	// cluster is rdb when it is a Redis Cluster client, else nil: with
	// waitReplicas, each master's votes then go in a pipeline of their own
	// on that master's client (see sendPerMaster).
	cluster      *redis.ClusterClient
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

// scriptCall is one vote in the batcher: its keys and arguments in the
// enqueue script, laid out by scriptArgs.call, and the slot of its answer.
type scriptCall struct {
	script *scriptArgs // lays out the command of its shard's votes
	shard  int
	// keyArgs and voteArgs are the vote's keys and arguments in the
	// script's command (see enqueueSrc).
	keyArgs  [2]any
	voteArgs [argsPerVote]any
	// buf holds the idempotency key then the stream entry, and is
	// reused with the call; key (&key in keyArgs) and entry (&entry in
	// voteArgs, stream.Encode's encoding) are slices of it.
	buf        []byte
	key, entry argBytes
	// createdAt is the principal's created_at (µs), &createdAt in voteArgs.
	createdAt int64
	deadline  time.Time        // answered by then
	done      chan scriptReply // buffered; one answer
	answered  atomic.Bool      // done has had its answer
	// holders counts who still holds the call: its request until it has
	// read its answer, and a batch under way (b.flying) until its leader
	// takes it out. The last to let go puts it back in the pool, so no
	// batch still listed as under way holds a call another vote reuses.
	holders atomic.Int32
}

// scriptReply is Redis' answer to one scriptCall.
type scriptReply struct {
	res      any
	err      error
	replicas int64 // acknowledged by WAIT, when asked
	waitErr  error
}

func newBatcher(rdb redis.UniversalClient, cfg Config, batchSize prometheus.Histogram) *batcher {
	timeout := cfg.RedisTimeout
	if cfg.WaitReplicas > 0 {
		timeout += cfg.WaitTimeout
	}
	cluster, _ := rdb.(*redis.ClusterClient)
	b := &batcher{
		rdb: rdb, cluster: cluster, timeout: timeout, maxBatch: cfg.EnqueueBatch, maxInFlight: cfg.EnqueuePipelines,
		waitReplicas: cfg.WaitReplicas, waitTimeout: cfg.WaitTimeout, batchSize: batchSize,
	}
	b.watch = time.AfterFunc(time.Hour, b.expire)
	b.watch.Stop()
	return b
}

// calls recycles the scriptCalls whose answer was received, so a vote
// allocates no call, command slice or answer channel.
var calls = sync.Pool{New: func() any { return &scriptCall{done: make(chan scriptReply, 1)} }}

// errDeadline answers a vote whose deadline passed before Redis answered
// it; the breaker counts it as a failure, as any Redis that does not answer
// in time.
var errDeadline = fmt.Errorf("no answer from Redis within the request deadline: %w", context.DeadlineExceeded)

// do sends the vote of c, a call from the calls pool, to the enqueue
// script and waits for its answer, at the latest until
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
	c.holders.Store(1)
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
	c.release()
	return r
}

// release lets go of c, and puts it back in the pool if nobody else holds
// it.
func (c *scriptCall) release() {
	if c.holders.Add(-1) == 0 {
		c.recycle()
	}
}

func (c *scriptCall) recycle() {
	c.script = nil
	clear(c.keyArgs[:])
	clear(c.voteArgs[:])
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
				answer(c, scriptReply{err: errDeadline})
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
			for _, c := range sent {
				c.release()
			}
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
		for _, c := range batch {
			c.holders.Add(1)
		}
		b.flying = append(b.flying, batch)
		b.mu.Unlock()
		b.send(ctx, batch)
		sent = batch
	}
}
