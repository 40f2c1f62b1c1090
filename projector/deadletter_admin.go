package projector

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"tally/stream"
)

// DeadLetter is one entry of a dead-letter stream.
type DeadLetter struct {
	Shard      int               `json:"shard"`
	ID         string            `json:"id"` // in the shard's dead-letter stream
	Reason     Reason            `json:"reason"`
	Error      string            `json:"error"`
	Stream     string            `json:"stream"`    // where it came from
	StreamID   string            `json:"stream_id"` // its id there
	Consumer   string            `json:"consumer"`
	Time       time.Time         `json:"time"`
	Deliveries int64             `json:"deliveries"`
	Fields     map[string]string `json:"fields"` // the original entry's fields
}

// Original is the principal, client event id and poll of the original
// entry, as well as its fields tell them ("" where they do not):
// stream.Peek.
func (d DeadLetter) Original() (principalID, clientEventID, pollID string) {
	return stream.Peek(d.Fields)
}

// Ref is how an operator names a dead letter: "SHARD/ID", or the bare ID
// when only one shard holds it.
func (d DeadLetter) Ref() string { return strconv.Itoa(d.Shard) + "/" + d.ID }

func parseDeadLetter(shard int, x redis.XMessage) DeadLetter {
	d := DeadLetter{Shard: shard, ID: x.ID, Fields: map[string]string{}}
	for k, v := range x.Values {
		s := fmt.Sprint(v)
		switch k {
		case FieldDLReason:
			d.Reason = Reason(s)
		case FieldDLError:
			d.Error = s
		case FieldDLStream:
			d.Stream = s
		case FieldDLID:
			d.StreamID = s
		case FieldDLConsumer:
			d.Consumer = s
		case FieldDLTime:
			d.Time, _ = time.Parse(time.RFC3339Nano, s)
		case FieldDLDeliveries:
			d.Deliveries, _ = strconv.ParseInt(s, 10, 64)
		default:
			d.Fields[k] = s
		}
	}
	return d
}

// ErrDeadLetterNotFound: no dead-letter stream holds the id asked for.
var ErrDeadLetterNotFound = errors.New("dead letter not found")

// DeadLetters gives an operator the dead-letter streams of one deployment.
type DeadLetters struct {
	rdb  redis.UniversalClient
	keys stream.Keys
}

// NewDeadLetters returns the dead-letter streams named by keys.
func NewDeadLetters(rdb redis.UniversalClient, keys stream.Keys) *DeadLetters {
	return &DeadLetters{rdb: rdb, keys: keys}
}

// List returns up to limit dead letters of every shard (all when limit is
// 0), oldest first.
func (dl *DeadLetters) List(ctx context.Context, limit int) ([]DeadLetter, error) {
	var out []DeadLetter
	for shard, key := range dl.keys.DeadLetters() {
		n := 0
		err := dl.scan(ctx, key, func(x redis.XMessage) bool {
			out = append(out, parseDeadLetter(shard, x))
			n++
			return limit == 0 || n < limit
		})
		if err != nil {
			return nil, err
		}
	}
	slices.SortStableFunc(out, func(a, b DeadLetter) int { return cmp.Compare(idMillis(a.ID), idMillis(b.ID)) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// scan calls fn on every entry of a dead-letter stream, in pages, until fn
// returns false.
func (dl *DeadLetters) scan(ctx context.Context, key string, fn func(redis.XMessage) bool) error {
	start := "-"
	for {
		xs, err := dl.rdb.XRangeN(ctx, key, start, "+", 500).Result()
		if err != nil {
			return fmt.Errorf("read dead letters of %s: %w", key, err)
		}
		for _, x := range xs {
			if !fn(x) {
				return nil
			}
		}
		if len(xs) < 500 {
			return nil
		}
		start = "(" + xs[len(xs)-1].ID
	}
}

// Get returns the dead letter ref names: "SHARD/ID", or a bare ID that
// one shard holds.
func (dl *DeadLetters) Get(ctx context.Context, ref string) (DeadLetter, error) {
	shards, id, err := dl.parseRef(ref)
	if err != nil {
		return DeadLetter{}, err
	}
	var found []DeadLetter
	for _, shard := range shards {
		xs, err := dl.rdb.XRange(ctx, dl.keys.DeadLetter(shard), id, id).Result()
		if err != nil {
			return DeadLetter{}, fmt.Errorf("read dead letter %s: %w", ref, err)
		}
		for _, x := range xs {
			found = append(found, parseDeadLetter(shard, x))
		}
	}
	switch len(found) {
	case 0:
		return DeadLetter{}, fmt.Errorf("%w: %s (list them with tally deadletter list)", ErrDeadLetterNotFound, ref)
	case 1:
		return found[0], nil
	}
	return DeadLetter{}, fmt.Errorf("dead letter %s is in several shards: name it as SHARD/ID, one of %s, %s", ref, found[0].Ref(), found[1].Ref())
}

func (dl *DeadLetters) parseRef(ref string) ([]int, string, error) {
	shardPart, id, explicit := strings.Cut(ref, "/")
	if !explicit {
		id = shardPart
	}
	if !validStreamID(id) {
		return nil, "", fmt.Errorf("dead letter id %q: want MILLIS-SEQ, or SHARD/MILLIS-SEQ", ref)
	}
	if !explicit {
		shards := make([]int, dl.keys.Shards())
		for i := range shards {
			shards[i] = i
		}
		return shards, id, nil
	}
	shard, err := strconv.Atoi(shardPart)
	if err != nil || shard < 0 || shard >= dl.keys.Shards() {
		return nil, "", fmt.Errorf("dead letter %q: shard must be between 0 and %d", ref, dl.keys.Shards()-1)
	}
	return []int{shard}, id, nil
}

func validStreamID(id string) bool {
	ms, seq, ok := strings.Cut(id, "-")
	if !ok {
		return false
	}
	_, err1 := strconv.ParseUint(ms, 10, 64)
	_, err2 := strconv.ParseUint(seq, 10, 64)
	return err1 == nil && err2 == nil
}

// idMillis is the time part of a stream id, in Unix milliseconds.
func idMillis(id string) int64 {
	ms, _, _ := strings.Cut(id, "-")
	n, _ := strconv.ParseInt(ms, 10, 64)
	return n
}

// Replay enqueues the original fields of the dead letters refs name on
// their shard's main stream again and removes them from the dead-letter
// stream (XADD then XDEL, in one MULTI). It returns the new stream ids.
func (dl *DeadLetters) Replay(ctx context.Context, refs ...string) ([]string, error) {
	var ds []DeadLetter
	for _, ref := range refs {
		d, err := dl.Get(ctx, ref)
		if err != nil {
			return nil, err
		}
		ds = append(ds, d)
	}
	return dl.replay(ctx, ds)
}

// ReplayAll replays every dead letter and returns the new stream ids.
func (dl *DeadLetters) ReplayAll(ctx context.Context) ([]string, error) {
	ds, err := dl.List(ctx, 0)
	if err != nil {
		return nil, err
	}
	return dl.replay(ctx, ds)
}

func (dl *DeadLetters) replay(ctx context.Context, ds []DeadLetter) ([]string, error) {
	for _, d := range ds {
		if len(d.Fields) == 0 {
			return nil, fmt.Errorf("dead letter %s (%s) has no original fields to replay: purge it instead", d.Ref(), d.Reason)
		}
	}
	var out []string
	for chunk := range shardRuns(ds, 500) {
		adds := make([]*redis.StringCmd, len(chunk))
		_, err := dl.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			for i, d := range chunk {
				values := make(map[string]any, len(d.Fields))
				for k, v := range d.Fields {
					values[k] = v
				}
				adds[i] = pipe.XAdd(ctx, &redis.XAddArgs{Stream: dl.keys.Stream(d.Shard), Values: originalValues(values)})
				pipe.XDel(ctx, dl.keys.DeadLetter(d.Shard), d.ID)
			}
			return nil
		})
		if err != nil {
			return out, fmt.Errorf("replay dead letters: %w", err)
		}
		for _, c := range adds {
			out = append(out, c.Val())
		}
	}
	return out, nil
}

// shardRuns cuts ds, in its order, into runs of at most n dead letters of
// one shard: a MULTI cannot span hash slots on a Redis Cluster, and a
// dead letter's stream and dead-letter stream share its shard's.
func shardRuns(ds []DeadLetter, n int) iter.Seq[[]DeadLetter] {
	return func(yield func([]DeadLetter) bool) {
		for len(ds) > 0 {
			end := 1
			for end < len(ds) && end < n && ds[end].Shard == ds[0].Shard {
				end++
			}
			if !yield(ds[:end]) {
				return
			}
			ds = ds[end:]
		}
	}
}

// Purge deletes the dead letters refs name and returns how many it
// deleted.
func (dl *DeadLetters) Purge(ctx context.Context, refs ...string) (int, error) {
	var ds []DeadLetter
	for _, ref := range refs {
		d, err := dl.Get(ctx, ref)
		if err != nil {
			return 0, err
		}
		ds = append(ds, d)
	}
	return dl.purge(ctx, ds)
}

// PurgeAll deletes every dead letter and returns how many it deleted.
func (dl *DeadLetters) PurgeAll(ctx context.Context) (int, error) {
	ds, err := dl.List(ctx, 0)
	if err != nil {
		return 0, err
	}
	return dl.purge(ctx, ds)
}

func (dl *DeadLetters) purge(ctx context.Context, ds []DeadLetter) (int, error) {
	n := 0
	for chunk := range slices.Chunk(ds, 500) {
		cmds := make([]*redis.IntCmd, len(chunk))
		_, err := dl.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for i, d := range chunk {
				cmds[i] = pipe.XDel(ctx, dl.keys.DeadLetter(d.Shard), d.ID)
			}
			return nil
		})
		for _, c := range cmds {
			n += int(c.Val())
		}
		if err != nil {
			return n, fmt.Errorf("purge dead letters: %w", err)
		}
	}
	return n, nil
}
