package projector_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tally/internal/testenv"
	"tally/ledger"
	"tally/projector"
	"tally/stream"
)

// TestProjectorCluster runs a projector on a private Redis Cluster of 3
// masters, with 6 stream shards spread over them: it reads every shard
// (one XREADGROUP each: a read cannot span hash slots), claims the
// entries a dead consumer left pending on every shard, acknowledges
// batches that hold entries of several shards (one MULTI per stream),
// and replays dead letters of two shards at once. Every batch is
// acknowledged the first time (no ack failure logged, no duplicate
// counted), and finish then checks that every vote is in the ledger once.
func TestProjectorCluster(t *testing.T) {
	t.Parallel()
	cluster := testenv.StartRedisCluster(t, 3, 0)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Masters, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	b := setup(t, withRedis(rdb, stream.DefaultPrefix), withShards(6))
	masters := map[string]int{}
	for _, s := range b.keys.Streams() {
		masters[cluster.MasterOf(s)]++
	}
	if len(masters) != 3 {
		t.Fatalf("the 6 shards are on %d masters (%v), want all 3", len(masters), masters)
	}

	b.poll("lunch", "pizza", "sushi")
	es := votes("u", 300, "lunch", "pizza", "sushi")
	b.enqueue(es...)
	gone := 0
	for shard := range b.keys.Shards() {
		gone += len(b.readShardAs(shard, "gone", 5))
	}
	// Two entries on two shards fail until fixed: dead-lettered, then
	// replayed together.
	broken := map[string]bool{} // principals
	brokenShards := map[int]bool{}
	for _, e := range es {
		if sh := b.keys.ShardOf(e.PrincipalID); len(brokenShards) < 2 && !brokenShards[sh] {
			brokenShards[sh] = true
			broken[e.PrincipalID] = true
		}
	}
	var fixed atomic.Bool
	app := applierFunc(func(ctx context.Context, events []ledger.Event) ([]ledger.Outcome, error) {
		for _, e := range events {
			if broken[e.PrincipalID] && !fixed.Load() {
				return nil, fmt.Errorf("append batch: %w", errPermanent)
			}
		}
		return b.store.Append(ctx, events)
	})
	cfg := fast("p1")
	cfg.Workers = 1 // a broken entry shares its batch with entries that commit, so it is at fault
	// Long enough that no batch still being applied (bisected around a
	// broken entry, on a loaded machine) is claimed back and applied twice:
	// a duplicate below then means an acknowledgement failed.
	cfg.MinIdle = 2 * time.Second
	r := b.start(app, cfg)
	b.waitDrained(30 * time.Second)
	ackFailed := func() {
		t.Helper()
		if logs := r.logs.String(); strings.Contains(logs, "acknowledge a committed batch failed") {
			t.Fatalf("an acknowledgement failed (the batch held entries of several shards):\n%s", logs)
		}
	}
	ackFailed()
	if got := r.metric("tally_projector_claimed_total"); got < float64(gone) {
		t.Errorf("claimed %v entries, want the %d a dead consumer left pending on every shard", got, gone)
	}
	ds := b.deadLetters()
	if len(ds) != 2 || ds[0].Shard == ds[1].Shard {
		t.Fatalf("dead letters %+v, want the 2 broken entries, of 2 shards", ds)
	}
	fixed.Store(true)
	ids, err := projector.NewDeadLetters(rdb, b.keys).ReplayAll(b.ctx)
	if err != nil || len(ids) != 2 {
		t.Fatalf("replay dead letters of 2 shards: %v, %v", ids, err)
	}
	b.waitDrained(30 * time.Second)
	if ds := b.deadLetters(); len(ds) != 0 {
		t.Errorf("dead letters after replay: %+v", ds)
	}
	st, err := projector.Inspect(b.ctx, rdb, b.keys)
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range st.Shards {
		if !sh.GroupExists || sh.Backlog != 0 || sh.Pending != 0 {
			t.Errorf("shard %d after the run: %+v", sh.Shard, sh)
		}
	}
	if n := b.ledgerRows(); n != int64(len(es)) {
		t.Errorf("ledger holds %d rows, want %d", n, len(es))
	}
	// Each batch was acknowledged the first time: no ack failed, and no
	// entry came back to be applied again (a duplicate), though batches
	// held entries of several shards on several masters.
	if got := r.metric("tally_projector_events_total", "outcome", "recorded"); got != float64(len(es)) {
		t.Errorf("%v events counted recorded, want %d", got, len(es))
	}
	if got := r.metric("tally_projector_events_total", "outcome", "duplicate"); got != 0 {
		t.Errorf("%v events counted duplicate, want 0: a committed batch was not acknowledged the first time", got)
	}
	ackFailed()
}

// readShardAs delivers up to n new entries of shard to consumer without
// acknowledging them, as a projector that dies right after reading would.
func (b *bundle) readShardAs(shard int, consumer string, n int) []redis.XMessage {
	b.t.Helper()
	s := b.keys.Stream(shard)
	if err := b.rdb.XGroupCreateMkStream(b.ctx, s, stream.Group, "0").Err(); err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
		b.t.Fatal(err)
	}
	res, err := b.rdb.XReadGroup(b.ctx, &redis.XReadGroupArgs{
		Group: stream.Group, Consumer: consumer, Streams: []string{s, ">"}, Count: int64(n), Block: -1,
	}).Result()
	if err != nil {
		b.t.Fatal(err)
	}
	return res[0].Messages
}
