package projector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"tally/ledger"
	"tally/stream"
)

// A batch goes through four layers, each adding one thing:
//
//	applyBatch     triage, and the verdict on entries that failed alone
//	bisect         splitting on a permanent failure, ack after commit
//	appendRetrying the breaker and backoff on transient errors
//	timedAppend    one Append, bounded by ApplyTimeout and measured

// item is an entry to apply: one that decoded.
type item struct {
	msg message
}

// batchState follows one batch through its bisection.
type batchState struct {
	committed bool       // some part of the batch committed
	suspects  []deadItem // entries that failed alone, isolated before anything committed
}

// errAbandoned wraps the error of a batch given up for now: it stays
// pending.
var errAbandoned = errors.New("batch left pending")

// applyBatch handles one batch a lane gathered, counted in the in-flight
// gauge: it dead-letters what cannot be applied, applies the rest in one
// transaction (bisect), then decides the fate of entries that failed alone.
// By its end every entry is settled, or handed to the acknowledger, which
// holds it until it is acknowledged.
func (p *Projector) applyBatch(ctx, applyCtx context.Context, msgs []message) {
	p.m.inFlight.Inc()
	defer p.m.inFlight.Dec()
	defer p.held.release(msgs)
	items, dead := p.triageBatch(msgs)
	p.deadLetter(applyCtx, dead)
	var st batchState
	commitsBefore := p.commits.Load()
	p.bisect(ctx, applyCtx, items, &st)
	p.judgeSuspects(ctx, applyCtx, len(items), st, commitsBefore)
}

// triageBatch decodes msgs, skipping an entry that appears twice (which the
// claim, passing over entries in flight, should never cause), and sets
// apart those to dead-letter.
func (p *Projector) triageBatch(msgs []message) ([]item, []deadItem) {
	seen := make(map[[2]string]bool, len(msgs)) // stream, id
	items := make([]item, 0, len(msgs))
	var dead []deadItem
	for _, m := range msgs {
		if seen[[2]string{m.stream, m.id}] {
			continue
		}
		seen[[2]string{m.stream, m.id}] = true
		if d, bad := p.triage(m); bad {
			dead = append(dead, d)
			continue
		}
		items = append(items, item{msg: m})
	}
	return items, dead
}

// triage says why m must be dead-lettered rather than applied, if it
// must.
func (p *Projector) triage(m message) (deadItem, bool) {
	switch {
	case m.values == nil:
		return deadItem{msg: m, reason: ReasonLost, detail: "the entry was deleted from the stream while it was pending"}, true
	case m.deliveries > int64(p.cfg.MaxDeliveries) && !p.lastFailure(m).transient:
		// An entry this projector saw fail only for transient reasons
		// (PostgreSQL down) is tried again, however often it came back.
		last := p.lastFailure(m).err
		if last == "" {
			last = "unknown to this consumer (the entry failed elsewhere, or its consumer stopped before it finished)"
		}
		return deadItem{msg: m, reason: ReasonMaxDeliveries, detail: fmt.Sprintf("delivered %d times, more than the %d allowed; last error: %s", m.deliveries, p.cfg.MaxDeliveries, last)}, true
	case errors.Is(m.undecoded, stream.ErrFingerprintMismatch):
		return deadItem{msg: m, reason: ReasonFingerprintMismatch, detail: m.undecoded.Error()}, true
	case m.undecoded != nil:
		return deadItem{msg: m, reason: ReasonUndecodable, detail: m.undecoded.Error()}, true
	}
	return deadItem{}, false
}

// judgeSuspects decides the fate of the entries of a batch of size entries
// that failed alone with a permanent error: dead-lettered when the
// database shows it takes writes, kept pending (and the lane slowed down)
// when not one entry anywhere committed.
func (p *Projector) judgeSuspects(ctx, applyCtx context.Context, size int, st batchState, commitsBefore int64) {
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
			slog.Int("batch_size", size), slog.String("error", st.suspects[0].detail), slog.Duration("wait", wait))
		sleep(ctx, wait)
	}
}

// bisect applies items in one transaction and hands them to the
// acknowledger after the commit. A permanent failure splits the batch in
// halves until the failing entries are isolated (judgeSuspects decides
// their fate, unless part of the batch committed already: then they are
// dead-lettered at once); a transient one that outlasts the retries leaves
// the batch pending.
func (p *Projector) bisect(ctx, applyCtx context.Context, items []item, st *batchState) {
	if len(items) == 0 {
		return
	}
	events := make([]ledger.Event, len(items))
	for i, it := range items {
		events[i] = it.msg.event
	}
	outcomes, err := p.appendRetrying(ctx, applyCtx, events)
	switch {
	case err == nil:
		st.committed = true
		p.commits.Add(1)
		p.held.hold(msgsOf(items)) // until acknowledged: a claim meanwhile would apply them again
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
		p.bisect(ctx, applyCtx, items[:half], st)
		p.bisect(ctx, applyCtx, items[half:], st)
	}
}

// appendRetrying calls Append through the breaker, retrying transient
// errors with backoff up to MaxAttempts times. It returns a permanent
// error as it is, and wraps errAbandoned around a transient one it gave up
// on (retries spent, or stopping).
func (p *Projector) appendRetrying(ctx, applyCtx context.Context, events []ledger.Event) ([]ledger.Outcome, error) {
	for attempt := 1; ; attempt++ {
		outcomes, err := p.cb.Execute(func() ([]ledger.Outcome, error) {
			return p.timedAppend(applyCtx, events)
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
		if breakerRefused(err) {
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

// timedAppend is one Append call, bounded by ApplyTimeout, its latency and
// size observed in the metrics.
func (p *Projector) timedAppend(applyCtx context.Context, events []ledger.Event) ([]ledger.Outcome, error) {
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

func msgsOf(items []item) []message {
	msgs := make([]message, len(items))
	for i, it := range items {
		msgs[i] = it.msg
	}
	return msgs
}

// failure is why an entry's last apply failed.
type failure struct {
	err       string
	transient bool
}

// remember notes why m's last apply failed, for its dead-letter record if
// it is given up later; the memory is bounded by maxRemembered.
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
