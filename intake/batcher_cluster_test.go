package intake

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tally/internal/testenv"
	"tally/ledger"
)

// The batcher on a private Redis Cluster of 3 masters with a replica each
// (one cluster for the subtests: it takes seconds to start).
func TestBatcherCluster(t *testing.T) {
	t.Parallel()
	cluster := testenv.StartRedisCluster(t, 3, 1)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Masters, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()

	// A vote per shard, in one pipeline, on masters of which one does not
	// know the script: each is enqueued once on its shard, whichever
	// master answered NOSCRIPT.
	t.Run("loads the script where it is missing", func(t *testing.T) {
		f := newShardedBatcherFixture(t, rdb, Config{EnqueuePipelines: 1}, 6)
		if err := enqueueScript.Load(ctx, rdb).Err(); err != nil {
			t.Fatal(err)
		}
		flushed := cluster.MasterOf(f.keys.Stream(0))
		flush := redis.NewClient(&redis.Options{Addr: flushed})
		defer flush.Close()
		if err := flush.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		votes := f.votesPerShard(t, "a")
		outs, errs := f.sendHeld(t, votes)
		for i := range votes {
			if errs[i] != nil || outs[i] != outAccepted {
				t.Fatalf("vote %v with the script flushed on %s: %s, %v", votes[i], flushed, outs[i], errs[i])
			}
		}
		f.wantOneEntryPerShard(t)
	})

	// WAIT follows each master's writes on its connection: with the
	// replica of one master paused, the vote on that master is not
	// confirmed and the votes on the others are, in the same batch.
	t.Run("waits on each vote's master", func(t *testing.T) {
		// A live replica must confirm within WaitTimeout, which 300 ms
		// did not always allow a loaded machine: 3 s, what the paused
		// master's WAIT then costs.
		f := newShardedBatcherFixture(t, rdb, Config{EnqueuePipelines: 1, WaitReplicas: 1, WaitTimeout: 3 * time.Second}, 6)
		votes := f.votesPerShard(t, "a")
		master := cluster.MasterOf(f.keys.Stream(0))
		replica := cluster.Replicas[master][0]
		cluster.Pause(replica)
		paused := true
		defer func() {
			if paused {
				cluster.Resume(replica)
			}
		}()
		reps := f.sendHeldReplies(t, votes)
		cluster.Resume(replica)
		paused = false
		for i, rep := range reps {
			if rep.err != nil || rep.waitErr != nil {
				t.Fatalf("vote %v: %v, WAIT: %v", votes[i], rep.err, rep.waitErr)
			}
			onPaused := cluster.MasterOf(f.keys.Stream(i)) == master
			switch {
			case onPaused && rep.replicas != 0:
				t.Errorf("shard %d (master %s, its replica paused): WAIT confirmed %d replicas", i, master, rep.replicas)
			case !onPaused && rep.replicas != 1:
				t.Errorf("shard %d (master %s): WAIT confirmed %d replicas, want 1", i, cluster.MasterOf(f.keys.Stream(i)), rep.replicas)
			}
		}
		f.wantOneEntryPerShard(t)
	})
}

// votesPerShard is one vote for candidate per stream shard, from a
// principal routed to that shard; votes[i] goes to shard i.
func (f *batcherFixture) votesPerShard(t *testing.T, candidate string) []ballot {
	t.Helper()
	votes := make([]ballot, f.keys.Shards())
	found := 0
	for i := 0; found < len(votes) && i < 10000; i++ {
		p := "p" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
		if sh := f.keys.ShardOf(p); votes[sh].principal == "" {
			votes[sh] = ballot{p, "e1", candidate}
			found++
		}
	}
	if found < len(votes) {
		t.Fatalf("found principals for %d of %d shards", found, len(votes))
	}
	return votes
}

// sendHeldReplies is sendHeld that returns each vote's whole reply.
func (f *batcherFixture) sendHeldReplies(t *testing.T, votes []ballot) []scriptReply {
	t.Helper()
	f.occupy(t)
	reps := make([]scriptReply, len(votes))
	done := make(chan struct{}, len(votes))
	for i, v := range votes {
		c := f.args.call(newVoter(ledger.Principal{ID: v.principal}, f.keys), v.eventID, f.poll,
			f.poll.choice([]byte(v.candidate)), time.Now(), false)
		go func() {
			reps[i] = f.b.do(context.Background(), c, time.Now().Add(5*time.Second))
			done <- struct{}{}
		}()
	}
	f.waitPending(t, len(votes))
	f.release()
	for range votes {
		testenv.Receive(t, done, 15*time.Second, "the script's answers to the votes held in one pipeline")
	}
	return reps
}

// wantOneEntryPerShard checks that every shard's stream holds one entry.
func (f *batcherFixture) wantOneEntryPerShard(t *testing.T) {
	t.Helper()
	for i := range f.keys.Shards() {
		if n, err := f.rdb.XLen(context.Background(), f.keys.Stream(i)).Result(); err != nil || n != 1 {
			t.Errorf("shard %d holds %d entries (%v), want 1", i, n, err)
		}
	}
}
