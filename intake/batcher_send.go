package intake

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file owns how the batcher's batch goes to Redis: the votes grouped
// by shard, one call of the enqueue script per shard (script.go lays it
// out), on one pipeline, or on a Redis Cluster with WAIT one pipeline per
// master, and each vote's own reply handed back to it.

// send runs one pipeline: one script call per shard, carrying the batch's
// votes of that shard in their order (EVALSHA, loading the script where
// Redis does not know it) and, with waitReplicas, one WAIT that covers
// every write of the pipeline's connection. A cluster client splits the
// pipeline by master by itself; with waitReplicas, sendPerMaster does.
func (b *batcher) send(ctx context.Context, batch []*scriptCall) {
	b.batchSize.Observe(float64(len(batch)))
	deadline := time.Now().Add(b.timeout)
	for _, c := range batch {
		if c.deadline.Before(deadline) {
			deadline = c.deadline
		}
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	shards := byShard(batch)
	if b.cluster != nil && b.waitReplicas > 0 {
		b.sendPerMaster(ctx, shards)
		return
	}
	b.sendOn(ctx, b.rdb, shards)
}

// byShard splits batch into the votes of each shard, each in batch's order.
func byShard(batch []*scriptCall) [][]*scriptCall {
	if !slices.ContainsFunc(batch, func(c *scriptCall) bool { return c.shard != batch[0].shard || c.script != batch[0].script }) {
		return [][]*scriptCall{batch}
	}
	var shards [][]*scriptCall
next:
	for _, c := range batch {
		for i, votes := range shards {
			if votes[0].shard == c.shard && votes[0].script == c.script {
				shards[i] = append(votes, c)
				continue next
			}
		}
		shards = append(shards, []*scriptCall{c})
	}
	return shards
}

// sendPerMaster sends the votes of each master of a cluster in a pipeline
// of their own, on that master's client, so that each WAIT follows the
// writes it confirms on their connection: WAIT counts the replicas that
// acknowledged the last write of the connection it runs on. A cluster
// client's pipeline would send the keyless WAIT to a master of its own
// choosing, on a connection that may hold none of the batch's writes, and
// a WAIT after no write confirms at once. A shard whose slot moved is
// answered with Redis' MOVED (no effect, so the client's retry is safe)
// and the cluster client reloads the slot map for the next ones.
func (b *batcher) sendPerMaster(ctx context.Context, shards [][]*scriptCall) {
	byMaster := map[*redis.Client][][]*scriptCall{}
	for _, votes := range shards {
		m, err := b.cluster.MasterForKey(ctx, string(votes[0].key))
		if err != nil {
			for _, c := range votes {
				answer(c, scriptReply{err: err})
			}
			continue
		}
		byMaster[m] = append(byMaster[m], votes)
	}
	var wg sync.WaitGroup
	for m, shards := range byMaster {
		wg.Go(func() { b.sendOn(ctx, m, shards) })
	}
	wg.Wait()
}

// waitClient is the client on which a write to key and the WAIT that
// confirms it go in one pipeline: rdb, or on a cluster the master of key's
// slot (see sendPerMaster).
func (b *batcher) waitClient(ctx context.Context, key string) (redis.Cmdable, error) {
	if b.cluster == nil || b.waitReplicas == 0 {
		return b.rdb, nil
	}
	return b.cluster.MasterForKey(ctx, key)
}

// sendOn runs the script calls of shards in one pipeline of rdb and
// answers each vote. The calls answered NOSCRIPT (a server that does not
// know the script: a new one, one restarted, a replica just promoted, or
// one master of a cluster) go again in a second pipeline once the script
// is loaded; a script error has no effect, and only those calls go again,
// since on a cluster the others may have been applied by masters that know
// it.
func (b *batcher) sendOn(ctx context.Context, rdb redis.Cmdable, shards [][]*scriptCall) {
	cmds, wait, err := b.pipeline(ctx, rdb, shards)
	var again [][]*scriptCall
	for i, votes := range shards {
		if redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
			again = append(again, votes)
			continue
		}
		b.answerFrom(ctx, votes, cmds[i], wait, err)
	}
	if len(again) == 0 {
		return
	}
	if lerr := enqueueScript.Load(ctx, rdb).Err(); lerr != nil {
		for _, votes := range again {
			for _, c := range votes {
				answer(c, scriptReply{err: fmt.Errorf("load the enqueue script: %w", lerr)})
			}
		}
		return
	}
	cmds, wait, err = b.pipeline(ctx, rdb, again)
	for i, votes := range again {
		b.answerFrom(ctx, votes, cmds[i], wait, err)
	}
}

// answerFrom answers each of votes with its reply in cmd's, the script
// call that carried them, and with WAIT's, in a pipeline that failed with
// err (nil when it did not). An error of the whole call is every vote's.
func (b *batcher) answerFrom(ctx context.Context, votes []*scriptCall, cmd, wait *redis.Cmd, err error) {
	var base scriptReply
	if wait != nil {
		base.replicas, base.waitErr = wait.Int64()
	}
	res, cerr := cmd.Result()
	if cerr == nil && err != nil && !isReplyError(err) {
		cerr = err
	}
	if b.cluster != nil && (redis.HasErrorPrefix(cerr, "MOVED") || redis.HasErrorPrefix(cerr, "ASK")) {
		b.cluster.ReloadState(ctx)
	}
	replies, ok := res.([]any)
	if cerr == nil && (!ok || len(replies) != len(votes)) {
		cerr = fmt.Errorf("enqueue script answered %v to %d votes", res, len(votes))
	}
	for i, c := range votes {
		r := base
		switch {
		case cerr != nil:
			r.err = cerr
		default:
			if rerr, isErr := replies[i].(error); isErr {
				r.err = rerr
			} else {
				r.res = replies[i]
			}
		}
		answer(c, r)
	}
}

// pipeline sends one script call per shard, and WAIT with waitReplicas.
func (b *batcher) pipeline(ctx context.Context, rdb redis.Cmdable, shards [][]*scriptCall) ([]*redis.Cmd, *redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(shards))
	var wait *redis.Cmd
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, votes := range shards {
			cmd := redis.NewCmd(ctx, votes[0].script.command(votes)...)
			cmd.SetFirstKeyPos(3) // for a cluster client: KEYS[1], the shard's stream, routes it
			p.Process(ctx, cmd)
			cmds[i] = cmd
		}
		if b.waitReplicas > 0 {
			wait = p.Do(ctx, "WAIT", b.waitReplicas, b.waitTimeout.Milliseconds())
		}
		return nil
	})
	return cmds, wait, err
}
