package projector

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"tally/stream"
)

// ShardStatus is what an operator wants to know of one stream shard.
type ShardStatus struct {
	Shard         int           `json:"shard"`
	Stream        string        `json:"stream"`
	Backlog       int64         `json:"backlog"` // entries in the stream: enqueued, not yet applied
	Pending       int64         `json:"pending"` // delivered to a consumer, not yet acknowledged
	OldestPending time.Duration `json:"-"`       // age of the oldest pending entry since it was enqueued
	// OldestUndelivered is the age of the oldest entry no consumer was
	// given yet, since it was enqueued: the lag a vote waits before any
	// projector reads it (0 when every entry was delivered).
	OldestUndelivered time.Duration `json:"-"`
	Consumers         int64         `json:"consumers"` // members of the consumer group
	DeadLetters       int64         `json:"dead_letters"`
	GroupExists       bool          `json:"group_exists"`
	// OldestPendingSeconds and OldestUndeliveredSeconds are the ages for
	// JSON.
	OldestPendingSeconds     float64 `json:"oldest_pending_seconds"`
	OldestUndeliveredSeconds float64 `json:"oldest_undelivered_seconds"`

	lastDelivered string // the group's last delivered id ("" without a group)
}

// Status is every shard's status and their sum (Total.OldestPending is the
// oldest of all; Total.Consumers the most of any shard).
type Status struct {
	Shards []ShardStatus `json:"shards"`
	Total  ShardStatus   `json:"total"`
}

// shardCmds are the replies Inspect reads for one shard.
type shardCmds struct {
	xlen, dead *redis.IntCmd
	groups     *redis.XInfoGroupsCmd
	pending    *redis.XPendingCmd
}

// Inspect reads the status of every shard from Redis, in one round trip,
// and a second for the shards that hold entries no consumer was given
// (the first of them, whose id tells its age). It changes nothing.
func Inspect(ctx context.Context, rdb redis.UniversalClient, keys stream.Keys) (Status, error) {
	cs := make([]shardCmds, keys.Shards())
	_, _ = rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i := range cs {
			s := keys.Stream(i)
			cs[i] = shardCmds{
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
		sh, err := c.status(i, keys, now)
		if err != nil {
			return Status{}, err
		}
		st.Shards[i] = sh
	}
	if err := oldestUndelivered(ctx, rdb, st.Shards, now); err != nil {
		return Status{}, err
	}
	for _, sh := range st.Shards {
		st.Total.add(sh)
	}
	st.Total.OldestPendingSeconds = st.Total.OldestPending.Seconds()
	st.Total.OldestUndeliveredSeconds = st.Total.OldestUndelivered.Seconds()
	return st, nil
}

// oldestUndelivered sets the age of the oldest entry not yet delivered of
// each shard that holds more entries than its group has pending: the
// first entry after the group's last delivered id (any entry, without a
// group), one XRANGE a shard, pipelined.
func oldestUndelivered(ctx context.Context, rdb redis.UniversalClient, shards []ShardStatus, now time.Time) error {
	cmds := make([]*redis.XMessageSliceCmd, len(shards))
	_, _ = rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, sh := range shards {
			if sh.Backlog <= sh.Pending {
				continue
			}
			from := "-"
			if sh.lastDelivered != "" && sh.lastDelivered != "0-0" {
				from = "(" + sh.lastDelivered
			}
			cmds[i] = pipe.XRangeN(ctx, sh.Stream, from, "+", 1)
		}
		return nil
	})
	for i, c := range cmds {
		if c == nil {
			continue
		}
		msgs, err := c.Result()
		if err != nil {
			return fmt.Errorf("inspect %s: %w", shards[i].Stream, err)
		}
		if len(msgs) > 0 {
			shards[i].OldestUndelivered = max(now.Sub(time.UnixMilli(idMillis(msgs[0].ID))), 0)
		}
		shards[i].OldestUndeliveredSeconds = shards[i].OldestUndelivered.Seconds()
	}
	return nil
}

// status reads the replies of shard i.
func (c shardCmds) status(i int, keys stream.Keys, now time.Time) (ShardStatus, error) {
	sh := ShardStatus{Shard: i, Stream: keys.Stream(i)}
	var err error
	if sh.Backlog, err = c.xlen.Result(); err != nil {
		return sh, fmt.Errorf("inspect %s: %w", sh.Stream, err)
	}
	if sh.DeadLetters, err = c.dead.Result(); err != nil {
		return sh, fmt.Errorf("inspect %s: %w", keys.DeadLetter(i), err)
	}
	groups, err := c.groups.Result()
	if err != nil && !missing(err) {
		return sh, fmt.Errorf("inspect %s: %w", sh.Stream, err)
	}
	for _, g := range groups {
		if g.Name == stream.Group {
			sh.GroupExists = true
			sh.Consumers = g.Consumers
			sh.lastDelivered = g.LastDeliveredID
		}
	}
	pend, err := c.pending.Result()
	if err != nil && !missing(err) {
		return sh, fmt.Errorf("inspect %s: %w", sh.Stream, err)
	}
	if pend != nil && pend.Count > 0 {
		sh.Pending = pend.Count
		sh.OldestPending = max(now.Sub(time.UnixMilli(idMillis(pend.Lower))), 0)
	}
	sh.OldestPendingSeconds = sh.OldestPending.Seconds()
	return sh, nil
}

// add sums sh into the total t.
func (t *ShardStatus) add(sh ShardStatus) {
	t.Backlog += sh.Backlog
	t.Pending += sh.Pending
	t.DeadLetters += sh.DeadLetters
	t.Consumers = max(t.Consumers, sh.Consumers)
	t.OldestPending = max(t.OldestPending, sh.OldestPending)
	t.OldestUndelivered = max(t.OldestUndelivered, sh.OldestUndelivered)
	t.GroupExists = t.GroupExists && sh.GroupExists
}

// missing reports Redis saying the stream or its group does not exist yet.
func missing(err error) bool {
	return redis.HasErrorPrefix(err, "NOGROUP") || redis.HasErrorPrefix(err, "no such key")
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
			for _, sh := range st.Shards {
				p.m.undelivered.WithLabelValues(strconv.Itoa(sh.Shard)).Set(sh.OldestUndelivered.Seconds())
			}
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
