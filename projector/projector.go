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
	// lastErr remembers, by entry, why its last apply failed, for the
	// dead-letter record when it is given up. Only the batching goroutine
	// touches it.
	lastErr map[string]failure
	// systemic counts the flushes in a row in which every entry failed
	// with a permanent error; it sets the wait before the next one.
	systemic int
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
// reading, lets the batch in flight commit for at most
// Config.ShutdownGrace, acknowledges what committed and returns nil.
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
		slog.Any("streams", p.keys.Streams()), slog.Int("batch_size", p.cfg.BatchSize),
		slog.Duration("batch_wait", p.cfg.BatchWait), slog.Duration("min_idle", p.cfg.MinIdle))

	// Append and the acknowledgements run on applyCtx, which outlives ctx
	// by the shutdown grace, so a batch in flight can still commit.
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

	p.batchLoop(ctx, applyCtx, in)
	wg.Wait()
	p.leaveGroup(applyCtx)
	p.log.LogAttrs(context.WithoutCancel(ctx), slog.LevelInfo, "projector stopped")
	return nil
}

// forgetConsumerScript deletes a consumer from the group, but only when no
// entry is pending on it: deleting a consumer drops its pending entries,
// which would then never be delivered again. A live consumer deleted this
// way is created again by its next read.
//
// KEYS: stream. ARGV: group, consumer.
var forgetConsumerScript = redis.NewScript(`
if #redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2]) > 0 then
  return 0
end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
return 1`)

// leaveGroup removes this consumer from the group of every stream where
// nothing is pending on it, so the group lists live consumers and those
// with work left for a claim.
func (p *Projector) leaveGroup(applyCtx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(applyCtx), redisTimeout)
	defer cancel()
	for _, s := range p.keys.Streams() {
		if err := forgetConsumerScript.Run(ctx, p.rdb, []string{s}, stream.Group, p.cfg.Consumer).Err(); err != nil {
			p.log.LogAttrs(ctx, slog.LevelDebug, "leave consumer group", slog.String("stream", s), slog.String("error", err.Error()))
		}
	}
}

// forgetIdleConsumers removes from the group of stream s the consumers
// that have nothing pending and were not seen for a long time: projectors
// that stopped without leaving.
func (p *Projector) forgetIdleConsumers(ctx context.Context, s string) {
	cs, err := p.rdb.XInfoConsumers(ctx, s, stream.Group).Result()
	if err != nil {
		return
	}
	after := max(10*p.cfg.MinIdle, time.Minute)
	for _, c := range cs {
		if c.Pending > 0 || c.Idle < after || c.Name == p.cfg.Consumer {
			continue
		}
		if n, err := forgetConsumerScript.Run(ctx, p.rdb, []string{s}, stream.Group, c.Name).Int(); err == nil && n == 1 {
			p.log.LogAttrs(ctx, slog.LevelInfo, "forgot an idle consumer with nothing pending",
				slog.String("stream", s), slog.String("idle_consumer", c.Name), slog.Duration("idle", c.Idle))
		}
	}
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
// capped at BackoffMax, with full jitter.
func (p *Projector) backoff(attempt int) time.Duration {
	d := p.cfg.BackoffMax
	if attempt < 31 {
		d = min(p.cfg.BackoffMin<<(attempt-1), p.cfg.BackoffMax)
	}
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// recoverLoop first re-reads this consumer's own pending entries (left by
// an earlier run under the same name), closes recovered, then claims
// entries idle for longer than MinIdle every ClaimInterval.
func (p *Projector) recoverLoop(ctx context.Context, in chan<- []message, recovered chan<- struct{}) {
	for _, s := range p.keys.Streams() {
		if !p.readOwnPending(ctx, s, in) {
			close(recovered)
			return
		}
	}
	close(recovered)
	t := time.NewTicker(p.cfg.ClaimInterval)
	defer t.Stop()
	for tick := 1; ; tick++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if p.cb.State() == gobreaker.StateOpen {
			continue
		}
		for _, s := range p.keys.Streams() {
			if !p.claim(ctx, s, in) {
				return
			}
			if tick%20 == 0 {
				p.forgetIdleConsumers(ctx, s)
			}
		}
	}
}

// readOwnPending reads the entries pending on this consumer in stream s
// (XREADGROUP from id 0) and hands them on; false when stopping.
func (p *Projector) readOwnPending(ctx context.Context, s string, in chan<- []message) bool {
	after := "0"
	for failures := 0; ctx.Err() == nil; {
		res, err := p.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: stream.Group, Consumer: p.cfg.Consumer,
			Streams: []string{s, after}, Count: int64(p.cfg.BatchSize), Block: -1,
		}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			if ctx.Err() != nil {
				return false
			}
			failures++
			p.redisFailed(ctx, "read own pending entries", err, failures)
			continue
		}
		if len(res) == 0 || len(res[0].Messages) == 0 {
			return true
		}
		xs := res[0].Messages
		after = xs[len(xs)-1].ID
		msgs := p.messages(s, xs, 0)
		p.lookupDeliveries(ctx, s, msgs)
		if lost := countLost(msgs); lost > 0 {
			p.m.lost.Add(float64(lost))
			p.log.LogAttrs(ctx, slog.LevelError, "pending entries were deleted from the stream before they were applied: they are lost; a tombstone goes to the dead-letter stream",
				slog.String("stream", s), slog.Int("entries", lost))
		}
		p.log.LogAttrs(ctx, slog.LevelInfo, "recovering own pending entries",
			slog.String("stream", s), slog.Int("entries", len(msgs)))
		if !send(ctx, in, msgs) {
			return false
		}
	}
	return false
}

// claim takes over entries of stream s idle for longer than MinIdle, from
// any consumer, and hands them on; false when stopping. Entries Redis
// reports as deleted while pending are dead-lettered as lost.
func (p *Projector) claim(ctx context.Context, s string, in chan<- []message) bool {
	start := "0-0"
	for range maxClaimPages {
		xs, next, deleted, err := p.rdb.XAutoClaimWithDeleted(ctx, &redis.XAutoClaimArgs{
			Stream: s, Group: stream.Group, Consumer: p.cfg.Consumer,
			MinIdle: p.cfg.MinIdle, Start: start, Count: int64(p.cfg.BatchSize),
		}).Result()
		if err != nil {
			if ctx.Err() != nil {
				return false
			}
			p.redisFailed(ctx, "claim idle entries", err, 1)
			return true
		}
		msgs := p.messages(s, xs, 0)
		if len(deleted) > 0 {
			p.m.lost.Add(float64(len(deleted)))
			p.log.LogAttrs(ctx, slog.LevelError, "pending entries were deleted from the stream before they were applied: they are lost; a tombstone goes to the dead-letter stream",
				slog.String("stream", s), slog.Any("ids", deleted))
			for _, id := range deleted {
				msgs = append(msgs, message{stream: s, shard: p.shards[s], id: id})
			}
		}
		if len(xs) > 0 {
			p.m.claimed.Add(float64(len(xs)))
			p.lookupDeliveries(ctx, s, msgs)
			p.log.LogAttrs(ctx, slog.LevelInfo, "claimed idle pending entries",
				slog.String("stream", s), slog.Int("entries", len(xs)))
		}
		if !send(ctx, in, msgs) {
			return false
		}
		if next == "0-0" || next == "" {
			return true
		}
		start = next
	}
	return true
}

func countLost(msgs []message) int {
	n := 0
	for _, m := range msgs {
		if m.values == nil {
			n++
		}
	}
	return n
}

// lookupDeliveries sets the delivery count of msgs from XPENDING, in one
// round trip. A count it cannot learn stays 0 (unknown).
func (p *Projector) lookupDeliveries(ctx context.Context, s string, msgs []message) {
	cmds := make([]*redis.XPendingExtCmd, 0, len(msgs))
	_, err := p.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, m := range msgs {
			cmds = append(cmds, pipe.XPendingExt(ctx, &redis.XPendingExtArgs{
				Stream: s, Group: stream.Group, Start: m.id, End: m.id, Count: 1,
			}))
		}
		return nil
	})
	if err != nil && ctx.Err() == nil {
		p.log.LogAttrs(ctx, slog.LevelWarn, "look up delivery counts", slog.String("stream", s), slog.String("error", err.Error()))
	}
	for i, c := range cmds {
		if pe, err := c.Result(); err == nil && len(pe) == 1 && pe[0].ID == msgs[i].id {
			msgs[i].deliveries = pe[0].RetryCount
		}
	}
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

// batchLoop gathers entries into batches and applies them, until ctx is
// done; then it applies what it holds once more, on applyCtx.
func (p *Projector) batchLoop(ctx, applyCtx context.Context, in <-chan []message) {
	var buf []message
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	armed := false
	for {
		select {
		case <-ctx.Done():
			if len(buf) > 0 {
				p.flush(ctx, applyCtx, buf)
			}
			return
		case msgs := <-in:
			buf = append(buf, msgs...)
			for len(buf) >= p.cfg.BatchSize {
				p.flush(ctx, applyCtx, buf[:p.cfg.BatchSize])
				buf = append(buf[:0:0], buf[p.cfg.BatchSize:]...)
				timer.Stop()
				armed = false
			}
			if len(buf) > 0 && !armed {
				timer.Reset(p.cfg.BatchWait)
				armed = true
			}
		case <-timer.C:
			armed = false
			if len(buf) > 0 {
				p.flush(ctx, applyCtx, buf)
				buf = nil
			}
		}
	}
}

// item is a decoded entry and the event it carries.
type item struct {
	msg   message
	event ledger.Event
}

// deadItem is an entry on its way to the dead-letter stream.
type deadItem struct {
	msg    message
	reason string // a dead-letter reason, one of the reason* constants
	detail string // the error, for a person
}

// Dead-letter reasons, the bounded label values of dead-lettered events.
const (
	ReasonUndecodable         = "undecodable"
	ReasonFingerprintMismatch = "fingerprint_mismatch"
	ReasonFailed              = "failed"
	ReasonMaxDeliveries       = "max_deliveries"
	ReasonLost                = "lost"
)

// flush handles one batch: it dead-letters what cannot be applied and
// applies the rest in one transaction.
func (p *Projector) flush(ctx, applyCtx context.Context, msgs []message) {
	seen := make(map[string]bool, len(msgs))
	items := make([]item, 0, len(msgs))
	var dead []deadItem
	for _, m := range msgs {
		if seen[m.key()] {
			continue // claimed while it was also in flight here
		}
		seen[m.key()] = true
		e, d, bad := p.triage(m)
		if bad {
			dead = append(dead, d)
			continue
		}
		items = append(items, item{msg: m, event: ledger.Event{
			PrincipalID: e.PrincipalID, ClientEventID: e.ClientEventID,
			PollID: e.PollID, CandidateID: e.CandidateID, ReceivedAt: e.ReceivedAt,
		}})
	}
	p.deadLetter(applyCtx, dead)
	var st flushState
	p.apply(ctx, applyCtx, items, &st)
	switch {
	case len(st.suspects) == 0:
		if st.committed {
			p.systemic = 0
		}
	case st.committed:
		// The ledger took the rest: these entries are at fault.
		p.deadLetter(applyCtx, st.suspects)
	default:
		// Not one entry went in. The fault is likelier the database's (a
		// schema or permission problem) than every entry's: keep them
		// pending, slow down, and let MaxDeliveries decide.
		for _, d := range st.suspects {
			p.remember(d.msg, failure{err: d.detail})
		}
		p.systemic++
		wait := p.backoff(p.systemic)
		p.log.LogAttrs(applyCtx, slog.LevelError, "every entry of the batch failed in the ledger with a permanent error: is the database migrated and writable? The entries stay pending and are dead-lettered once delivered more than the max deliveries",
			slog.Int("batch_size", len(items)), slog.String("error", st.suspects[0].detail), slog.Duration("wait", wait))
		sleep(ctx, wait)
	}
}

// flushState follows one flush through the bisection of a failing batch.
type flushState struct {
	committed bool       // some part of the batch committed
	suspects  []deadItem // entries that failed alone, isolated before anything committed
}

// triage decodes m, or says why it must be dead-lettered rather than
// applied.
func (p *Projector) triage(m message) (stream.Entry, deadItem, bool) {
	switch {
	case m.values == nil:
		return stream.Entry{}, deadItem{msg: m, reason: ReasonLost, detail: "the entry was deleted from the stream while it was pending"}, true
	case m.deliveries > int64(p.cfg.MaxDeliveries) && !p.lastErr[m.key()].transient:
		// An entry this projector saw fail only for transient reasons
		// (PostgreSQL down) is tried again, however often it came back.
		last := p.lastErr[m.key()].err
		if last == "" {
			last = "unknown to this consumer (the entry failed elsewhere, or its consumer stopped before it finished)"
		}
		return stream.Entry{}, deadItem{msg: m, reason: ReasonMaxDeliveries, detail: fmt.Sprintf("delivered %d times, more than the %d allowed; last error: %s", m.deliveries, p.cfg.MaxDeliveries, last)}, true
	}
	e, err := stream.Decode(m.values)
	if err != nil {
		return e, deadItem{msg: m, reason: ReasonUndecodable, detail: err.Error()}, true
	}
	if want := ledger.FingerprintHex(e.PollID, e.CandidateID); e.Fingerprint != want {
		return e, deadItem{msg: m, reason: ReasonFingerprintMismatch, detail: fmt.Sprintf("fingerprint %s does not match the payload's %s", e.Fingerprint, want)}, true
	}
	return e, deadItem{}, false
}

// errAbandoned wraps the error of a batch given up for now: it stays
// pending.
var errAbandoned = errors.New("batch left pending")

// apply applies items in one transaction and acknowledges them after the
// commit. A permanent failure splits the batch in halves until the failing
// entries are isolated (flush dead-letters them, or keeps them pending when
// nothing of the batch could commit); a transient one that outlasts the
// retries leaves the batch pending.
func (p *Projector) apply(ctx, applyCtx context.Context, items []item, st *flushState) {
	if len(items) == 0 {
		return
	}
	events := make([]ledger.Event, len(items))
	for i, it := range items {
		events[i] = it.event
	}
	outcomes, err := p.applyWithRetry(ctx, applyCtx, events)
	switch {
	case err == nil:
		st.committed = true
		p.acknowledge(applyCtx, items, outcomes)
	case errors.Is(err, errAbandoned):
		for _, it := range items {
			p.remember(it.msg, failure{err: err.Error(), transient: true})
		}
		level := slog.LevelWarn
		if ctx.Err() != nil {
			level = slog.LevelInfo
		}
		p.log.LogAttrs(applyCtx, level, "batch not applied, its entries stay pending",
			slog.Int("batch_size", len(items)), slog.String("error", err.Error()))
	case len(items) == 1:
		d := deadItem{msg: items[0].msg, reason: ReasonFailed, detail: err.Error()}
		if st.committed {
			p.deadLetter(applyCtx, []deadItem{d})
		} else {
			st.suspects = append(st.suspects, d)
		}
	default:
		p.log.LogAttrs(applyCtx, slog.LevelWarn, "batch failed, splitting it to isolate the failing entries",
			slog.Int("batch_size", len(items)), slog.String("error", err.Error()))
		half := len(items) / 2
		p.apply(ctx, applyCtx, items[:half], st)
		p.apply(ctx, applyCtx, items[half:], st)
	}
}

// isTransient reports an error after which the same batch may succeed: a
// retryable ledger error, an uncertain outcome (timeout, stop), or the
// breaker refusing the call.
func isTransient(err error) bool {
	return ledger.IsRetryable(err) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests)
}

// applyWithRetry calls Append through the breaker, retrying transient
// errors with backoff up to MaxAttempts times. It returns a permanent
// error as it is, and wraps errAbandoned around a transient one it gave up
// on (retries spent, or stopping).
func (p *Projector) applyWithRetry(ctx, applyCtx context.Context, events []ledger.Event) ([]ledger.Outcome, error) {
	for attempt := 1; ; attempt++ {
		outcomes, err := p.cb.Execute(func() ([]ledger.Outcome, error) {
			return p.appendOnce(applyCtx, events)
		})
		if err == nil {
			if len(outcomes) != len(events) {
				return nil, fmt.Errorf("the ledger answered %d outcomes for %d events", len(outcomes), len(events))
			}
			return outcomes, nil
		}
		if !isTransient(err) {
			p.m.applyErrs.WithLabelValues(kindPermanent).Inc()
			return nil, err
		}
		if !errors.Is(err, gobreaker.ErrOpenState) && !errors.Is(err, gobreaker.ErrTooManyRequests) {
			p.m.applyErrs.WithLabelValues(kindTransient).Inc()
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: stopping: %w", errAbandoned, err)
		}
		if attempt >= p.cfg.MaxAttempts {
			return nil, fmt.Errorf("%w after %d attempts: %w", errAbandoned, attempt, err)
		}
		wait := p.backoff(attempt)
		p.log.LogAttrs(ctx, slog.LevelWarn, "transient error applying batch, retrying",
			slog.Int("batch_size", len(events)), slog.Int("attempt", attempt),
			slog.Duration("wait", wait), slog.String("error", err.Error()))
		if !sleep(ctx, wait) {
			return nil, fmt.Errorf("%w: stopping: %w", errAbandoned, err)
		}
	}
}

// appendOnce is one Append call, bounded by ApplyTimeout.
func (p *Projector) appendOnce(applyCtx context.Context, events []ledger.Event) ([]ledger.Outcome, error) {
	if err := applyCtx.Err(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(applyCtx, p.cfg.ApplyTimeout)
	defer cancel()
	start := time.Now()
	outcomes, err := p.app.Append(ctx, events)
	p.m.applyTime.Observe(time.Since(start).Seconds())
	p.m.batchSize.Observe(float64(len(events)))
	return outcomes, err
}

func (p *Projector) remember(m message, f failure) {
	if len(p.lastErr) >= maxRemembered {
		clear(p.lastErr)
	}
	p.lastErr[m.key()] = f
}

// acknowledge counts the outcomes of a committed batch and acknowledges
// and deletes its entries: XACK and XDEL in one MULTI per stream.
func (p *Projector) acknowledge(applyCtx context.Context, items []item, outcomes []ledger.Outcome) {
	var recorded, duplicate, rejected int
	for i, o := range outcomes {
		switch o.Status {
		case ledger.StatusRecorded:
			recorded++
		case ledger.StatusDuplicate:
			duplicate++
		case ledger.StatusRejected:
			rejected++
			p.m.events.WithLabelValues(string(o.Status), string(o.Reason)).Inc()
		}
		delete(p.lastErr, items[i].msg.key())
	}
	p.m.events.WithLabelValues(string(ledger.StatusRecorded), "").Add(float64(recorded))
	p.m.events.WithLabelValues(string(ledger.StatusDuplicate), "").Add(float64(duplicate))

	ctx, cancel := context.WithTimeout(context.WithoutCancel(applyCtx), redisTimeout)
	defer cancel()
	ids := map[string][]string{}
	for _, it := range items {
		ids[it.msg.stream] = append(ids[it.msg.stream], it.msg.id)
	}
	_, err := p.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		for s, list := range ids {
			pipe.XAck(ctx, s, stream.Group, list...)
			pipe.XDel(ctx, s, list...)
		}
		return nil
	})
	if err != nil {
		// The batch committed; its entries stay pending and come back as
		// duplicates.
		p.log.LogAttrs(ctx, slog.LevelWarn, "acknowledge a committed batch failed; its entries will be delivered again and answer duplicate",
			slog.Int("batch_size", len(items)), slog.String("error", err.Error()))
		return
	}
	p.log.LogAttrs(ctx, slog.LevelDebug, "batch applied",
		slog.Int("batch_size", len(items)), slog.Int("recorded", recorded),
		slog.Int("duplicate", duplicate), slog.Int("rejected", rejected))
}

// deadLetterScript moves one entry to the dead-letter stream: XADD to the
// dead-letter stream, then XACK and XDEL on the main stream, atomically.
// When the entry must still be pending (ARGV[3] = "1") and no longer is,
// another consumer handled it already and the script does nothing, so an
// entry is dead-lettered once even when two consumers held it.
//
// KEYS: stream, dead-letter stream (one hash tag). ARGV: group, id,
// must be pending, field/value pairs.
var deadLetterScript = redis.NewScript(`
if ARGV[3] == "1" and #redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1) == 0 then
  return 0
end
redis.call('XADD', KEYS[2], '*', unpack(ARGV, 4))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return 1`)

// deadLetter moves items to their shard's dead-letter stream (see
// deadLetterScript), in one round trip. When it fails, the entries stay
// pending and come back.
func (p *Projector) deadLetter(applyCtx context.Context, items []deadItem) {
	if len(items) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(applyCtx), redisTimeout)
	defer cancel()
	now := time.Now()
	cmds := make([]*redis.Cmd, len(items))
	_, err := p.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, d := range items {
			mustBePending := "1"
			if d.msg.values == nil {
				mustBePending = "0" // XAUTOCLAIM already dropped it from the pending list
			}
			args := append([]any{stream.Group, d.msg.id, mustBePending}, deadLetterValues(d, p.cfg.Consumer, now)...)
			cmds[i] = deadLetterScript.Eval(ctx, pipe, []string{d.msg.stream, p.keys.DeadLetter(d.msg.shard)}, args...)
		}
		return nil
	})
	if err != nil {
		p.log.LogAttrs(ctx, slog.LevelError, "dead-letter entries failed; they stay pending and come back",
			slog.Int("entries", len(items)), slog.String("error", err.Error()))
	}
	for i, d := range items {
		if n, err := cmds[i].Int(); err != nil || n == 0 {
			continue // failed (logged above), or handled by another consumer
		}
		p.m.events.WithLabelValues(outcomeDeadLettered, d.reason).Inc()
		delete(p.lastErr, d.msg.key())
		p.log.LogAttrs(ctx, slog.LevelWarn, "entry dead-lettered",
			slog.String("stream", d.msg.stream), slog.String("id", d.msg.id),
			slog.String("reason", d.reason), slog.String("error", d.detail))
	}
}
