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
	cfg  Config
	app  Applier
	rdb  redis.UniversalClient
	keys stream.Keys
	// cluster: rdb is a Redis Cluster client, on which one command or
	// transaction cannot span the streams' hash slots.
	cluster bool
	log     *slog.Logger
	m       *metrics
	cb      *gobreaker.CircuitBreaker[[]ledger.Outcome]
	shards  map[string]int // stream key -> shard
	// checkpoints is the applier as a Checkpointer, when Config.LogSigner
	// is set.
	checkpoints Checkpointer

	running atomic.Bool
	// acks carries committed batches from the workers to the goroutine
	// that acknowledges them (see startAcknowledger).
	acks chan ackJob
	// mu guards lastErr, which remembers, by entry, why its last apply
	// failed, for the dead-letter record when it is given up.
	mu      sync.Mutex
	lastErr map[string]failure
	// systemic counts the batches in a row, over all workers, in which
	// every entry failed with a permanent error; it sets the wait before
	// the next one.
	systemic atomic.Int64
	// commits counts the Append calls, over all workers, that committed:
	// a batch that fails as a whole while another worker's commits shows
	// a database that takes writes.
	commits atomic.Int64
	// held is what this projector has read or claimed and not yet
	// settled; its claim passes over these entries.
	held inFlight
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
		return nil, fmt.Errorf("projector: %w", err)
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
	_, p.cluster = rdb.(*redis.ClusterClient)
	for i, s := range keys.Streams() {
		p.shards[s] = i
	}
	p.cb = p.newBreaker()
	if cfg.LogSigner != nil {
		cp, ok := app.(Checkpointer)
		if !ok {
			return nil, errors.New("projector: a log signer is given, but the applier cannot store checkpoints (it is not a Checkpointer)")
		}
		p.checkpoints = cp
	}
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
	p.held.reset()
	if joined, err := p.joinGroups(ctx); !joined {
		return err
	}
	p.log.LogAttrs(ctx, slog.LevelInfo, "projector started",
		slog.Any("streams", p.keys.Streams()), slog.Int("batch_size", p.cfg.BatchSize), slog.Int("workers", p.cfg.Workers),
		slog.Duration("batch_wait", p.cfg.BatchWait), slog.Duration("min_idle", p.cfg.MinIdle))

	applyCtx, cancelApply := p.graceContext(ctx)
	defer cancelApply()
	in := make(chan []message)
	var wg sync.WaitGroup
	p.startReaders(ctx, &wg, in)
	if p.checkpoints != nil {
		wg.Go(func() { p.checkpointLoop(ctx) })
	}
	acked := p.startAcknowledger(applyCtx)
	// batchLoop returns once every lane has finished, so no batch is sent
	// on acks after it is closed.
	p.batchLoop(ctx, applyCtx, in)
	close(p.acks)
	<-acked
	wg.Wait()
	if p.checkpoints != nil {
		// The last batches' heads get their checkpoint, within the grace.
		p.signHeads(applyCtx)
	}
	p.leaveGroup(applyCtx)
	p.log.LogAttrs(context.WithoutCancel(ctx), slog.LevelInfo, "projector stopped")
	return nil
}

// joinGroups creates the consumer groups, retrying while Redis is
// unreachable. It reports false when ctx ended first (with a nil error)
// or Redis answered no (a key of another type, a missing permission).
func (p *Projector) joinGroups(ctx context.Context) (bool, error) {
	for failures := 1; ; failures++ {
		err := p.ensureGroups(ctx)
		if err == nil {
			return true, nil
		}
		if ctx.Err() != nil {
			return false, nil
		}
		var refused redis.Error
		if errors.As(err, &refused) {
			return false, err
		}
		p.redisFailed(ctx, "create consumer groups", err, failures)
	}
}

// graceContext returns the context Append and the acknowledgements run
// on: it outlives ctx by Config.ShutdownGrace, so the batches in flight
// can still commit after a stop.
func (p *Projector) graceContext(ctx context.Context) (context.Context, context.CancelFunc) {
	applyCtx, cancelApply := context.WithCancel(context.WithoutCancel(ctx))
	stopGrace := context.AfterFunc(ctx, func() {
		t := time.NewTimer(p.cfg.ShutdownGrace)
		defer t.Stop()
		select {
		case <-t.C:
			cancelApply()
		case <-applyCtx.Done():
		}
	})
	return applyCtx, func() {
		cancelApply()
		stopGrace()
	}
}

// startReaders starts, in wg, the goroutines that hand entries to in: the
// recovery of pending entries first, then the stream readers, and the
// gauges' refresh.
func (p *Projector) startReaders(ctx context.Context, wg *sync.WaitGroup, in chan<- []message) {
	recovered := make(chan struct{})
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
