package projector

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"tally/stream"
)

// ShardStatus is what an operator wants to know of one stream shard.
type ShardStatus struct {
	Shard         int           `json:"shard"`
	Stream        string        `json:"stream"`
	Backlog       int64         `json:"backlog"`   // entries in the stream: enqueued, not yet applied
	Pending       int64         `json:"pending"`   // delivered to a consumer, not yet acknowledged
	OldestPending time.Duration `json:"-"`         // age of the oldest pending entry since it was enqueued
	Consumers     int64         `json:"consumers"` // members of the consumer group
	DeadLetters   int64         `json:"dead_letters"`
	GroupExists   bool          `json:"group_exists"`
	// OldestPendingSeconds is OldestPending for JSON.
	OldestPendingSeconds float64 `json:"oldest_pending_seconds"`
}

// Status is every shard's status and their sum (Total.OldestPending is the
// oldest of all; Total.Consumers the most of any shard).
type Status struct {
	Shards []ShardStatus `json:"shards"`
	Total  ShardStatus   `json:"total"`
}

// Inspect reads the status of every shard from Redis, one round trip. It
// changes nothing.
func Inspect(ctx context.Context, rdb redis.UniversalClient, keys stream.Keys) (Status, error) {
	type cmds struct {
		xlen, dead *redis.IntCmd
		groups     *redis.XInfoGroupsCmd
		pending    *redis.XPendingCmd
	}
	cs := make([]cmds, keys.Shards())
	_, _ = rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i := range cs {
			s := keys.Stream(i)
			cs[i] = cmds{
				xlen:    pipe.XLen(ctx, s),
				dead:    pipe.XLen(ctx, keys.DeadLetter(i)),
				groups:  pipe.XInfoGroups(ctx, s),
				pending: pipe.XPending(ctx, s, stream.Group),
			}
		}
		return nil
	})
	now := time.Now()
	st := Status{Shards: make([]ShardStatus, len(cs)), Total: ShardStatus{Shard: -1, Stream: "total", GroupExists: true}}
	for i, c := range cs {
		sh := ShardStatus{Shard: i, Stream: keys.Stream(i)}
		var err error
		if sh.Backlog, err = c.xlen.Result(); err != nil {
			return Status{}, fmt.Errorf("inspect %s: %w", sh.Stream, err)
		}
		if sh.DeadLetters, err = c.dead.Result(); err != nil {
			return Status{}, fmt.Errorf("inspect %s: %w", keys.DeadLetter(i), err)
		}
		groups, err := c.groups.Result()
		if err != nil && !missing(err) {
			return Status{}, fmt.Errorf("inspect %s: %w", sh.Stream, err)
		}
		for _, g := range groups {
			if g.Name == stream.Group {
				sh.GroupExists = true
				sh.Consumers = g.Consumers
			}
		}
		pend, err := c.pending.Result()
		if err != nil && !missing(err) {
			return Status{}, fmt.Errorf("inspect %s: %w", sh.Stream, err)
		}
		if pend != nil && pend.Count > 0 {
			sh.Pending = pend.Count
			sh.OldestPending = max(now.Sub(time.UnixMilli(idMillis(pend.Lower))), 0)
		}
		sh.OldestPendingSeconds = sh.OldestPending.Seconds()
		st.Shards[i] = sh

		t := &st.Total
		t.Backlog += sh.Backlog
		t.Pending += sh.Pending
		t.DeadLetters += sh.DeadLetters
		t.Consumers = max(t.Consumers, sh.Consumers)
		t.OldestPending = max(t.OldestPending, sh.OldestPending)
		t.GroupExists = t.GroupExists && sh.GroupExists
	}
	st.Total.OldestPendingSeconds = st.Total.OldestPending.Seconds()
	return st, nil
}

// missing reports Redis saying the stream or its group does not exist yet.
func missing(err error) bool {
	return redis.HasErrorPrefix(err, "NOGROUP") || redis.HasErrorPrefix(err, "no such key")
}
