package projector

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"time"

	"tally/vote"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"tally/ledger"
	"tally/stream"
)

// batchLoop splits what the readers hand over among Config.Workers lanes,
// by principal, and each lane gathers its own batches and applies them one
// at a time (lane). All the entries of one principal go through one lane,
// in stream order, so a principal's first answer reaches the ledger before
// the second even while other lanes' batches are applied at once: every
// rule that depends on order is about one principal. Each lane has a
// mailbox the split drops entries into without waiting, so a lane that is
// slow (a batch waiting on a lock, a poison entry) does not starve the
// others; only when a lane's mailbox holds a full batch does the split wait
// for it, and with it the readers: memory stays bounded. When ctx is done
// each lane applies what it holds, on applyCtx, and batchLoop returns once
// every lane has finished.
func (p *Projector) batchLoop(ctx, applyCtx context.Context, in <-chan []message) {
	lanes := make([]*mailbox, p.cfg.Workers)
	var wg sync.WaitGroup
	for w := range lanes {
		lanes[w] = newMailbox()
		wg.Go(func() { p.lane(ctx, applyCtx, lanes[w]) })
	}
	defer wg.Wait()
	seed := maphash.MakeSeed()
	parts := make([][]message, len(lanes))
	for {
		select {
		case <-ctx.Done():
			return
		case msgs := <-in:
			for _, m := range msgs {
				w := 0 // an entry without a principal is dead-lettered in any lane
				if principal, ok := m.values[stream.FieldPrincipal].(string); ok && len(lanes) > 1 {
					w = int(maphash.String(seed, principal) % uint64(len(lanes)))
				}
				parts[w] = append(parts[w], m)
			}
			for w, part := range parts {
				if len(part) > 0 && !lanes[w].put(ctx, part, p.cfg.BatchSize) {
					return // what is not handed over stays pending
				}
				parts[w] = nil
			}
		}
	}
}

// mailbox is what the split has handed to one lane and the lane has not
// taken yet.
type mailbox struct {
	mu    sync.Mutex
	msgs  []message
	ready chan struct{} // a token while msgs is not empty
	space chan struct{} // a token when the lane has taken msgs
}

func newMailbox() *mailbox {
	return &mailbox{ready: make(chan struct{}, 1), space: make(chan struct{}, 1)}
}

// put adds msgs, first waiting while the mailbox holds at least limit
// entries. It reports false when ctx ended first.
func (mb *mailbox) put(ctx context.Context, msgs []message, limit int) bool {
	for {
		mb.mu.Lock()
		if len(mb.msgs) < limit {
			mb.msgs = append(mb.msgs, msgs...)
			mb.mu.Unlock()
			signal(mb.ready)
			return true
		}
		mb.mu.Unlock()
		select {
		case <-mb.space:
		case <-ctx.Done():
			return false
		}
	}
}

// take returns what the mailbox holds and empties it.
func (mb *mailbox) take() []message {
	mb.mu.Lock()
	msgs := mb.msgs
	mb.msgs = nil
	mb.mu.Unlock()
	signal(mb.space)
	return msgs
}

// signal leaves a token in c unless one is there already.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// lane gathers the entries of its mailbox into batches and applies each
// one when it holds Config.BatchSize entries or Config.BatchWait has passed
// since its first entry arrived, until ctx is done; then it applies what it
// holds once more, on applyCtx.
func (p *Projector) lane(ctx, applyCtx context.Context, mb *mailbox) {
	var buf []message
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	armed := false
	size := p.cfg.BatchSize
	for {
		select {
		case <-ctx.Done():
			buf = append(buf, mb.take()...)
			for len(buf) > 0 {
				n := min(len(buf), size)
				p.apply1(ctx, applyCtx, buf[:n])
				buf = buf[n:]
			}
			return
		case <-mb.ready:
			buf = append(buf, mb.take()...)
			for len(buf) >= size {
				p.apply1(ctx, applyCtx, buf[:size:size])
				buf = append([]message(nil), buf[size:]...)
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
				p.apply1(ctx, applyCtx, buf)
				buf = nil
			}
		}
	}
}

// apply1 applies one batch, counted in the in-flight gauge.
func (p *Projector) apply1(ctx, applyCtx context.Context, msgs []message) {
	p.m.inFlight.Inc()
	defer p.m.inFlight.Dec()
	p.flush(ctx, applyCtx, msgs)
}

// item is a decoded entry and the event it carries.
type item struct {
	msg   message
	event ledger.Event
}

// deadItem is an entry on its way to the dead-letter stream.
type deadItem struct {
	msg    message
	reason string // a dead-letter reason, one of the Reason* constants
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
	seen := make(map[[2]string]bool, len(msgs)) // stream, id
	items := make([]item, 0, len(msgs))
	var dead []deadItem
	for _, m := range msgs {
		if seen[[2]string{m.stream, m.id}] {
			continue // claimed while it was also in flight here
		}
		seen[[2]string{m.stream, m.id}] = true
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
	commitsBefore := p.commits.Load()
	p.apply(ctx, applyCtx, items, &st)
	switch {
	case len(st.suspects) == 0:
		if st.committed {
			p.systemic.Store(0)
		}
	case st.committed:
		// The ledger took the rest: these entries are at fault.
		p.deadLetter(applyCtx, st.suspects)
	case p.commits.Load() > commitsBefore:
		// Not one entry of this batch went in, but another worker's batch
		// committed meanwhile: the database takes writes, so these entries
		// are at fault (a lane's batch can be a single poison entry).
		p.deadLetter(applyCtx, st.suspects)
	default:
		// Not one entry went in. The fault is likelier the database's (a
		// schema or permission problem) than every entry's: keep them
		// pending, slow down, and let MaxDeliveries decide.
		for _, d := range st.suspects {
			p.remember(d.msg, failure{err: d.detail})
		}
		wait := p.backoff(int(p.systemic.Add(1)))
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
	case m.deliveries > int64(p.cfg.MaxDeliveries) && !p.lastFailure(m).transient:
		// An entry this projector saw fail only for transient reasons
		// (PostgreSQL down) is tried again, however often it came back.
		last := p.lastFailure(m).err
		if last == "" {
			last = "unknown to this consumer (the entry failed elsewhere, or its consumer stopped before it finished)"
		}
		return stream.Entry{}, deadItem{msg: m, reason: ReasonMaxDeliveries, detail: fmt.Sprintf("delivered %d times, more than the %d allowed; last error: %s", m.deliveries, p.cfg.MaxDeliveries, last)}, true
	}
	e, err := stream.Decode(m.values)
	if err != nil {
		return e, deadItem{msg: m, reason: ReasonUndecodable, detail: err.Error()}, true
	}
	if want := vote.FingerprintHex(e.PollID, e.CandidateID); e.Fingerprint != want {
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
		p.commits.Add(1)
		p.acks <- ackJob{items: items, outcomes: outcomes}
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
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: stopping: %w", errAbandoned, err)
		}
		if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
			// The breaker holds every worker while PostgreSQL fails (or
			// while another worker's batch probes it): this batch was not
			// tried, so it costs no attempt. The worker keeps it and waits,
			// which stops the reading too.
			attempt--
			sleep(ctx, min(p.cfg.BreakerOpenFor, 100*time.Millisecond))
			continue
		}
		p.m.applyErrs.WithLabelValues(kindTransient).Inc()
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
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.lastErr) >= maxRemembered {
		clear(p.lastErr)
	}
	p.lastErr[m.key()] = f
}

func (p *Projector) lastFailure(m message) failure {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastErr[m.key()]
}

func (p *Projector) forget(m message) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.lastErr) > 0 {
		delete(p.lastErr, m.key())
	}
}

// ackJob is a committed batch on its way to acknowledge.
type ackJob struct {
	items    []item
	outcomes []ledger.Outcome
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
		p.forget(items[i].msg)
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
		p.forget(d.msg)
		p.log.LogAttrs(ctx, slog.LevelWarn, "entry dead-lettered",
			slog.String("stream", d.msg.stream), slog.String("id", d.msg.id),
			slog.String("reason", d.reason), slog.String("error", d.detail))
	}
}
