package projector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"tally/ledger"
	"tally/stream"
)

// Applier is what the projector needs of the ledger. *ledger.Store
// satisfies it. Append must apply the events in one transaction and answer
// as ledger.Store.Append does.
type Applier interface {
	Append(ctx context.Context, events []ledger.Event) ([]ledger.Outcome, error)
}

// maxBatcher is implemented by appliers that bound their batch size, as
// *ledger.Store does.
type maxBatcher interface{ MaxBatch() int }

const (
	// readBlock bounds one blocking stream read, and so how long a stop
	// may wait for a reader.
	readBlock = 250 * time.Millisecond
	// redisTimeout bounds the acknowledgements and dead-letter writes done
	// after a commit, which run even when Run's context is cancelled.
	redisTimeout = 10 * time.Second
	// maxClaimPages bounds the XAUTOCLAIM calls of one stream per tick.
	maxClaimPages = 16
	// maxRemembered bounds the failures remembered for dead-letter reasons.
	maxRemembered = 100_000
)

// Projector applies stream entries to the ledger. Create it with New and
// run it with Run.
type Projector struct {
	cfg    Config
	app    Applier
	rdb    redis.UniversalClient
	keys   stream.Keys
	log    *slog.Logger
	m      *metrics
	cb     *gobreaker.CircuitBreaker[[]ledger.Outcome]
	shards map[string]int // stream key -> shard

	running atomic.Bool
	// acks carries committed batches from the workers to the goroutine
	// that acknowledges them (see Run).
	acks chan ackJob
	// mu guards lastErr, which remembers, by entry, why its last apply
	// failed, for the dead-letter record when it is given up.
	mu      sync.Mutex
	lastErr map[string]failure
	// systemic counts the flushes in a row, over all workers, in which
	// every entry failed with a permanent error; it sets the wait before
	// the next one.
	systemic atomic.Int64
	// commits counts the Append calls, over all workers, that committed:
	// a batch that fails as a whole while another worker's commits shows
	// a database that takes writes.
	commits atomic.Int64
}

// failure is why an entry's last apply failed.
type failure struct {
	err       string
	transient bool
}

// New returns a projector that applies the streams named by keys through
// app. log may be nil (discard); metrics are registered with reg, or with a
// private registry when reg is nil.
func New(app Applier, rdb redis.UniversalClient, keys stream.Keys, cfg Config, log *slog.Logger, reg prometheus.Registerer) (*Projector, error) {
	if app == nil || rdb == nil || keys.Shards() == 0 {
		return nil, errors.New("projector: an applier, a Redis client and stream keys are required")
	}
	cfg = cfg.withDefaults()
	maxBatch := 0
	if mb, ok := app.(maxBatcher); ok {
		maxBatch = mb.MaxBatch()
	}
	if err := cfg.validate(maxBatch); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("projector: register metrics: %w", err)
	}
	p := &Projector{
		cfg:     cfg,
		app:     app,
		rdb:     rdb,
		keys:    keys,
		log:     log.With(slog.String("component", "projector"), slog.String("consumer", cfg.Consumer)),
		m:       m,
		shards:  make(map[string]int, keys.Shards()),
		lastErr: map[string]failure{},
	}
	for i, s := range keys.Streams() {
		p.shards[s] = i
	}
	p.cb = gobreaker.NewCircuitBreaker[[]ledger.Outcome](gobreaker.Settings{
		Name:        "postgresql",
		MaxRequests: 1,
		Timeout:     cfg.BreakerOpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.ConsecutiveFailures >= uint32(cfg.BreakerFailures)
		},
		// A permanent error means PostgreSQL answered: the data was bad.
		IsSuccessful: func(err error) bool { return err == nil || !isTransient(err) },
		// A stop is no verdict on PostgreSQL.
		IsExcluded: func(err error) bool { return errors.Is(err, context.Canceled) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			m.breaker.Set(breakerValue(to))
			attrs := []any{slog.String("from", from.String()), slog.String("to", to.String())}
			switch to {
			case gobreaker.StateOpen:
				p.log.Warn("circuit breaker open: PostgreSQL is failing, reading paused", attrs...)
			case gobreaker.StateHalfOpen:
				p.log.Info("circuit breaker half-open: probing PostgreSQL with one batch", attrs...)
			case gobreaker.StateClosed:
				p.log.Info("circuit breaker closed: PostgreSQL answers, reading resumed", attrs...)
			}
		},
	})
	return p, nil
}

// Consumer is the projector's name in the consumer group.
func (p *Projector) Consumer() string { return p.cfg.Consumer }

// Run applies entries until ctx is cancelled, then stops: it stops
// reading, lets the batches in flight and the one it was filling commit
// for at most Config.ShutdownGrace, acknowledges what committed and
// returns nil.
// Entries it held but did not apply stay pending, for this consumer's next
// start or another consumer's claim. Run returns an error only when it
// cannot start because Redis refuses to create the consumer group (it
// retries while Redis is unreachable); it may run again after it
// returned, but not twice at once.
func (p *Projector) Run(ctx context.Context) error {
	if !p.running.CompareAndSwap(false, true) {
		return errors.New("projector: Run is already running")
	}
	defer p.running.Store(false)
	for failures := 1; ; failures++ {
		err := p.ensureGroups(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		var refused redis.Error
		if errors.As(err, &refused) {
			return err // Redis answered no: a key of another type, a missing permission
		}
		p.redisFailed(ctx, "create consumer groups", err, failures)
	}
	p.log.LogAttrs(ctx, slog.LevelInfo, "projector started",
		slog.Any("streams", p.keys.Streams()), slog.Int("batch_size", p.cfg.BatchSize), slog.Int("workers", p.cfg.Workers),
		slog.Duration("batch_wait", p.cfg.BatchWait), slog.Duration("min_idle", p.cfg.MinIdle))

	// Append and the acknowledgements run on applyCtx, which outlives ctx
	// by the shutdown grace, so the batches in flight can still commit.
	applyCtx, cancelApply := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelApply()
	stopGrace := context.AfterFunc(ctx, func() {
		t := time.NewTimer(p.cfg.ShutdownGrace)
		defer t.Stop()
		select {
		case <-t.C:
			cancelApply()
		case <-applyCtx.Done():
		}
	})
	defer stopGrace()

	in := make(chan []message)
	recovered := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { p.recoverLoop(ctx, in, recovered) })
	for _, streams := range p.readerStreams() {
		wg.Go(func() {
			select {
			case <-recovered:
			case <-ctx.Done():
				return
			}
			p.readLoop(ctx, streams, in)
		})
	}
	wg.Go(func() { p.statsLoop(ctx) })

	// Committed batches are acknowledged by a goroutine of their own, so
	// that the workers go on to their next batch while Redis acknowledges
	// the last one. Each batch is still acknowledged only after its
	// commit; at most one waits while another is being acknowledged.
	// batchLoop returns once every worker has finished, so no batch is
	// sent on acks after it is closed.
	p.acks = make(chan ackJob, 1)
	acked := make(chan struct{})
	go func() {
		defer close(acked)
		for j := range p.acks {
			p.acknowledge(applyCtx, j.items, j.outcomes)
		}
	}()
	p.batchLoop(ctx, applyCtx, in)
	close(p.acks)
	<-acked
	wg.Wait()
	p.leaveGroup(applyCtx)
	p.log.LogAttrs(context.WithoutCancel(ctx), slog.LevelInfo, "projector stopped")
	return nil
}

// ensureGroups creates the consumer group on every stream, from the start
// of the stream, when it is missing.
func (p *Projector) ensureGroups(ctx context.Context) error {
	for _, s := range p.keys.Streams() {
		err := p.rdb.XGroupCreateMkStream(ctx, s, stream.Group, "0").Err()
		if err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
			return fmt.Errorf("projector: create consumer group %s on %s: %w", stream.Group, s, err)
		}
	}
	return nil
}

// readerStreams groups the streams by blocking reader: one reader for all
// of them on one Redis server, one per stream on a cluster, where one read
// cannot span hash slots.
func (p *Projector) readerStreams() [][]string {
	streams := p.keys.Streams()
	if _, cluster := p.rdb.(*redis.ClusterClient); !cluster {
		return [][]string{streams}
	}
	out := make([][]string, len(streams))
	for i, s := range streams {
		out[i] = []string{s}
	}
	return out
}

// message is one stream entry on its way through the projector.
type message struct {
	stream     string
	shard      int
	id         string
	values     map[string]any // nil: Redis reports the entry deleted
	deliveries int64          // times delivered, 0 when unknown
}

func (m message) key() string { return m.stream + "/" + m.id }

func (p *Projector) messages(s string, xs []redis.XMessage, deliveries int64) []message {
	out := make([]message, len(xs))
	for i, x := range xs {
		out[i] = message{stream: s, shard: p.shards[s], id: x.ID, values: x.Values, deliveries: deliveries}
	}
	return out
}

// send hands msgs to the batching goroutine; false when stopping.
func send(ctx context.Context, in chan<- []message, msgs []message) bool {
	if len(msgs) == 0 {
		return true
	}
	select {
	case in <- msgs:
		return true
	case <-ctx.Done():
		return false
	}
}

// sleep waits d or until ctx is done; false when ctx is done.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// readLoop reads new entries of streams (">") until ctx is done. It pauses
// while the breaker is open.
func (p *Projector) readLoop(ctx context.Context, streams []string, in chan<- []message) {
	args := &redis.XReadGroupArgs{
		Group:    stream.Group,
		Consumer: p.cfg.Consumer,
		Streams:  make([]string, 0, 2*len(streams)),
		Count:    int64(p.cfg.BatchSize),
		Block:    readBlock,
	}
	args.Streams = append(args.Streams, streams...)
	for range streams {
		args.Streams = append(args.Streams, ">")
	}
	failures := 0
	for ctx.Err() == nil {
		if p.cb.State() == gobreaker.StateOpen {
			sleep(ctx, min(p.cfg.BreakerOpenFor, 100*time.Millisecond))
			continue
		}
		res, err := p.rdb.XReadGroup(ctx, args).Result()
		if errors.Is(err, redis.Nil) {
			failures = 0
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			p.redisFailed(ctx, "read streams", err, failures)
			continue
		}
		failures = 0
		for _, xs := range res {
			if !send(ctx, in, p.messages(xs.Stream, xs.Messages, 1)) {
				return // still pending: this consumer's next start or a claim takes them
			}
		}
	}
}

// redisFailed logs a failed Redis call, recreates the consumer group when
// Redis says it is gone, and waits before the next try.
func (p *Projector) redisFailed(ctx context.Context, what string, err error, failures int) {
	p.log.LogAttrs(ctx, slog.LevelWarn, "redis call failed, retrying",
		slog.String("op", what), slog.Int("failures", failures), slog.String("error", err.Error()))
	if redis.HasErrorPrefix(err, "NOGROUP") {
		if err := p.ensureGroups(ctx); err != nil {
			p.log.LogAttrs(ctx, slog.LevelWarn, "recreate consumer group", slog.String("error", err.Error()))
		}
	}
	sleep(ctx, p.backoff(failures))
}

// backoff is the wait before try attempt+1: exponential from BackoffMin,
// capped at BackoffMax, jittered between half and all of it so that
// projectors failing together do not retry together.
func (p *Projector) backoff(attempt int) time.Duration {
	d := p.cfg.BackoffMax
	if attempt < 31 {
		d = min(p.cfg.BackoffMin<<(attempt-1), p.cfg.BackoffMax)
	}
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// statsLoop refreshes the backlog, pending and dead-letter gauges.
func (p *Projector) statsLoop(ctx context.Context) {
	t := time.NewTicker(p.cfg.StatsInterval)
	defer t.Stop()
	for {
		st, err := Inspect(ctx, p.rdb, p.keys)
		if err == nil {
			p.m.backlog.Set(float64(st.Total.Backlog))
			p.m.pending.Set(float64(st.Total.Pending))
			p.m.oldest.Set(st.Total.OldestPending.Seconds())
			p.m.deadLetter.Set(float64(st.Total.DeadLetters))
		} else if ctx.Err() == nil {
			p.log.LogAttrs(ctx, slog.LevelWarn, "refresh stream gauges", slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
