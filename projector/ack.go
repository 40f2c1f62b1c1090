package projector

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"tally/ledger"
	"tally/stream"
)

// ackJob is a committed batch on its way to acknowledge.
type ackJob struct {
	items    []item
	outcomes []ledger.Outcome
}

// startAcknowledger acknowledges the committed batches sent on p.acks, in
// a goroutine of its own, so that the workers go on to their next batch
// while Redis acknowledges the last one. Each batch is still acknowledged
// only after its commit; at most one waits while another is being
// acknowledged. The returned channel is closed once p.acks is closed and
// drained.
func (p *Projector) startAcknowledger(applyCtx context.Context) <-chan struct{} {
	p.acks = make(chan ackJob, 1)
	acked := make(chan struct{})
	go func() {
		defer close(acked)
		for j := range p.acks {
			p.acknowledge(applyCtx, j.items, j.outcomes)
		}
	}()
	return acked
}

// acknowledge counts the outcomes of a committed batch and acknowledges
// and deletes its entries (ackDelete). Then they are no longer in flight
// here: those left unacknowledged are claimed again after MinIdle.
func (p *Projector) acknowledge(applyCtx context.Context, items []item, outcomes []ledger.Outcome) {
	defer p.held.release(msgsOf(items))
	recorded, duplicate, rejected := p.countOutcomes(items, outcomes)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(applyCtx), redisTimeout)
	defer cancel()
	ids := map[string][]string{}
	for _, it := range items {
		ids[it.msg.stream] = append(ids[it.msg.stream], it.msg.id)
	}
	unacked, err := p.ackDelete(ctx, ids)
	if err != nil {
		// The batch committed; its entries stay pending and come back as
		// duplicates.
		p.m.ackErrs.Add(float64(unacked))
		p.log.LogAttrs(ctx, slog.LevelWarn, "acknowledge a committed batch failed; its entries will be delivered again and answer duplicate",
			slog.Int("batch_size", len(items)), slog.Int("unacknowledged", unacked), slog.String("error", err.Error()))
		return
	}
	p.log.LogAttrs(ctx, slog.LevelDebug, "batch applied",
		slog.Int("batch_size", len(items)), slog.Int("recorded", recorded),
		slog.Int("duplicate", duplicate), slog.Int("rejected", rejected))
}

// ackDelete acknowledges and deletes the entries ids lists by stream: XACK
// and XDEL in a MULTI, so that no entry is left acknowledged in its stream
// (never delivered again, yet counted in the backlog). On one server one
// MULTI holds every stream's; on a cluster, where a transaction cannot
// span hash slots, each stream has its own, sent at once. It returns how
// many entries were left unacknowledged, with the first error.
func (p *Projector) ackDelete(ctx context.Context, ids map[string][]string) (unacked int, err error) {
	queue := func(pipe redis.Pipeliner, s string, list []string) {
		pipe.XAck(ctx, s, stream.Group, list...)
		pipe.XDel(ctx, s, list...)
	}
	if !p.cluster || len(ids) == 1 {
		_, err := p.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			for s, list := range ids {
				queue(pipe, s, list)
			}
			return nil
		})
		if err != nil {
			for _, list := range ids {
				unacked += len(list)
			}
		}
		return unacked, err
	}
	type result struct {
		entries int
		err     error
	}
	results := make(chan result, len(ids))
	for s, list := range ids {
		go func() {
			_, err := p.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
				queue(pipe, s, list)
				return nil
			})
			results <- result{len(list), err}
		}()
	}
	var first error
	for range ids {
		r := <-results
		if r.err == nil {
			continue
		}
		unacked += r.entries
		if first == nil {
			first = fmt.Errorf("%w (the other streams' entries were acknowledged)", r.err)
		}
	}
	return unacked, first
}

// countOutcomes adds the outcomes of a committed batch to the events
// counter and forgets the failures remembered for its entries.
func (p *Projector) countOutcomes(items []item, outcomes []ledger.Outcome) (recorded, duplicate, rejected int) {
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
	return recorded, duplicate, rejected
}
