package projector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"tally/stream"
)

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
		if !p.handOn(ctx, in, msgs) {
			return false
		}
	}
	return false
}

// claimScript takes over the entries of a stream idle for longer than a
// minimum, except those this consumer holds in flight: XAUTOCLAIM JUSTID
// (which counts no delivery) claims them all and reports those deleted
// while pending, then XCLAIM delivers the ones not held, counting one
// delivery each. An entry held here only starts its idle time again and
// stays this consumer's: claiming it would apply it a second time, after
// the commit of the first. One held here and deleted from the stream is
// not reported lost either: this consumer holds its fields and applies it.
//
// KEYS: stream. ARGV: group, consumer, min idle (ms), start, count, then
// the ids held. Reply: next start, the entries claimed (as XCLAIM answers),
// the ids deleted and not held.
var claimScript = redis.NewScript(`
local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], 'COUNT', ARGV[5], 'JUSTID')
local held = {}
for i = 6, #ARGV do held[ARGV[i]] = true end
local ids = {}
for _, id in ipairs(r[2]) do
  if not held[id] then ids[#ids + 1] = id end
end
local entries = {}
for i = 1, #ids, 500 do
  local part = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, unpack(ids, i, math.min(i + 499, #ids)))
  for _, e in ipairs(part) do entries[#entries + 1] = e end
end
local gone = {}
for _, id in ipairs(r[3]) do
  if not held[id] then gone[#gone + 1] = id end
end
return {r[1], entries, gone}`)

// claim takes over entries of stream s idle for longer than MinIdle, from
// any consumer, except those in flight here, and hands them on; false
// when stopping. Entries Redis reports as deleted while pending are
// dead-lettered as lost.
func (p *Projector) claim(ctx context.Context, s string, in chan<- []message) bool {
	start := "0-0"
	for range maxClaimPages {
		xs, next, deleted, err := p.claimPage(ctx, s, start)
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
		if !p.handOn(ctx, in, msgs) {
			return false
		}
		if next == "0-0" || next == "" {
			return true
		}
		start = next
	}
	return true
}

// claimPage runs claimScript on stream s from start: the entries claimed,
// the next start, and the ids deleted while pending.
func (p *Projector) claimPage(ctx context.Context, s, start string) (xs []redis.XMessage, next string, deleted []string, err error) {
	held := p.held.heldFor(s, heldMargin(p.cfg.MinIdle))
	args := make([]any, 0, 5+len(held))
	args = append(args, stream.Group, p.cfg.Consumer, p.cfg.MinIdle.Milliseconds(), start, p.cfg.BatchSize)
	for _, id := range held {
		args = append(args, id)
	}
	res, err := claimScript.Run(ctx, p.rdb, []string{s}, args...).Slice()
	if err != nil {
		return nil, "", nil, err
	}
	if len(res) != 3 {
		return nil, "", nil, fmt.Errorf("claim script answered %d elements, want 3", len(res))
	}
	next, _ = res[0].(string)
	entries, _ := res[1].([]any)
	for _, e := range entries {
		x, err := xMessage(e)
		if err != nil {
			return nil, "", nil, err
		}
		xs = append(xs, x)
	}
	ids, _ := res[2].([]any)
	for _, id := range ids {
		if id, ok := id.(string); ok {
			deleted = append(deleted, id)
		}
	}
	return xs, next, deleted, nil
}

// heldMargin is how long an entry must have been held here before the
// claim names it to Redis as held: only an entry delivered at least
// minIdle ago can be claimed, and one held for less than half of it was
// delivered too recently, however long the read took to reach the hold.
// Below a second every held entry is named. So a claim names only the
// slow batches' entries, not every entry in the mailboxes.
func heldMargin(minIdle time.Duration) time.Duration {
	if minIdle < time.Second {
		return 0
	}
	return minIdle / 2
}

// xMessage reads one entry of an XCLAIM reply, [id, [field, value, ...]].
func xMessage(v any) (redis.XMessage, error) {
	e, _ := v.([]any)
	if len(e) != 2 {
		return redis.XMessage{}, fmt.Errorf("claim script: an entry is %T %v, want [id, fields]", v, v)
	}
	id, _ := e[0].(string)
	fields, _ := e[1].([]any)
	if id == "" || len(fields)%2 != 0 {
		return redis.XMessage{}, fmt.Errorf("claim script: entry %v has no id or an odd number of fields", e)
	}
	values := make(map[string]any, len(fields)/2)
	for i := 0; i < len(fields); i += 2 {
		k, _ := fields[i].(string)
		values[k] = fields[i+1]
	}
	return redis.XMessage{ID: id, Values: values}, nil
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
