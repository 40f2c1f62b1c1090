package loadtest

import (
	"context"

	"github.com/redis/go-redis/v9"

	"tally/projector"
	"tally/stream"
)

// QueueStatus is what the loadtest needs to know of the queue between
// intake and projector.
type QueueStatus struct {
	Backlog     int64 `json:"backlog"`      // entries in the streams, not yet applied
	Pending     int64 `json:"pending"`      // delivered to a projector, not yet acknowledged
	DeadLetters int64 `json:"dead_letters"` // entries in the dead-letter streams
}

// Drained reports whether nothing waits to be applied.
func (q QueueStatus) Drained() bool { return q.Backlog == 0 && q.Pending == 0 }

// Queue reads the status of the queue.
type Queue interface {
	Status(ctx context.Context) (QueueStatus, error)
}

// QueueFunc turns a function into a Queue.
type QueueFunc func(ctx context.Context) (QueueStatus, error)

// Status calls f.
func (f QueueFunc) Status(ctx context.Context) (QueueStatus, error) { return f(ctx) }

// RedisQueue reads the queue from the Redis streams named by keys, as
// `tally status` does. It only reads.
func RedisQueue(rdb redis.UniversalClient, keys stream.Keys) Queue {
	return QueueFunc(func(ctx context.Context) (QueueStatus, error) {
		st, err := projector.Inspect(ctx, rdb, keys)
		if err != nil {
			return QueueStatus{}, err
		}
		return QueueStatus{Backlog: st.Total.Backlog, Pending: st.Total.Pending, DeadLetters: st.Total.DeadLetters}, nil
	})
}
