package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"tally/stream"
)

// Mark is, per stream shard, the id of the last entry enqueued at one
// moment ("" when the shard was empty): the backlog a fault left behind.
type Mark map[string]string

// MarkBacklog reads the id of the last entry of every stream shard.
func MarkBacklog(ctx context.Context, rdb redis.UniversalClient, keys stream.Keys) (Mark, error) {
	m := Mark{}
	for _, key := range keys.Streams() {
		msgs, err := rdb.XRevRangeN(ctx, key, "+", "-", 1).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("mark backlog of %s: %w", key, err)
		}
		if len(msgs) > 0 {
			m[key] = msgs[0].ID
		}
	}
	return m, nil
}

// Drained reports whether every entry up to the mark is gone from its
// stream, that is applied (or dead-lettered) and deleted. Entries enqueued
// after the mark do not count.
func (m Mark) Drained(ctx context.Context, rdb redis.UniversalClient) (bool, error) {
	for key, last := range m {
		msgs, err := rdb.XRangeN(ctx, key, "-", last, 1).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return false, fmt.Errorf("read backlog of %s: %w", key, err)
		}
		if len(msgs) > 0 {
			return false, nil
		}
	}
	return true, nil
}

// WaitDrained polls every 25ms, for at most limit, until the backlog up to
// the mark is drained, and returns how long that took from since.
func (m Mark) WaitDrained(ctx context.Context, rdb redis.UniversalClient, since time.Time, limit time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		qctx, qcancel := context.WithTimeout(ctx, time.Second)
		ok, err := m.Drained(qctx, rdb)
		qcancel()
		if err == nil && ok {
			return time.Since(since), nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return time.Since(since), fmt.Errorf("backlog up to the mark not drained within %s: %w", limit, err)
		case <-time.After(25 * time.Millisecond):
		}
	}
}
