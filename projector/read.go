package projector

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"tally/ledger"
	"tally/stream"
)

// readerStreams groups the streams by blocking reader: one reader for all
// of them on one Redis server, one per stream on a cluster, where one read
// cannot span hash slots.
func (p *Projector) readerStreams() [][]string {
	streams := p.keys.Streams()
	if !p.cluster {
		return [][]string{streams}
	}
	out := make([][]string, len(streams))
	for i, s := range streams {
		out[i] = []string{s}
	}
	return out
}

// message is one stream entry on its way through the projector, decoded
// once, when it is read: its event goes to the ledger as it is.
type message struct {
	stream     string
	shard      int
	id         string
	values     map[string]any // nil: Redis reports the entry deleted
	deliveries int64          // times delivered, 0 when unknown
	event      ledger.Event   // decoded from values (stream.Decode)
	undecoded  error          // why values did not decode; nil when they did or are nil
}

func (m message) key() string { return m.stream + "/" + m.id }

func (p *Projector) messages(s string, xs []redis.XMessage, deliveries int64) []message {
	out := make([]message, len(xs))
	for i, x := range xs {
		out[i] = message{stream: s, shard: p.shards[s], id: x.ID, values: x.Values, deliveries: deliveries}
		if x.Values != nil {
			out[i].event, out[i].undecoded = stream.Decode(x.Values)
		}
	}
	return out
}

// handOn marks msgs in flight and hands them to the batching goroutine;
// false when stopping.
func (p *Projector) handOn(ctx context.Context, in chan<- []message, msgs []message) bool {
	if len(msgs) == 0 {
		return true
	}
	p.held.hold(msgs)
	select {
	case in <- msgs:
		return true
	case <-ctx.Done():
		p.held.release(msgs)
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
			if !p.handOn(ctx, in, p.messages(xs.Stream, xs.Messages, 1)) {
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
