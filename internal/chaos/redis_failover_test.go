package chaos_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tally/internal/loadtest"
	"tally/internal/pause"
	"tally/internal/testenv"
	"tally/stream"
)

// redis-cluster-failover and redis-sentinel-failover: mid load a Redis
// master is killed with SIGKILL (as a lost machine) and its replica is
// promoted, by the cluster's other masters or by the sentinels. The
// daemons, started with --redis-mode cluster or sentinel, follow the new
// master without a restart; once the promotion is seen the old master is
// started again on its files and rejoins as a replica of the new one, as
// an operator replacing the machine would.
//
// Each runs twice. With intake's --redis-wait-replicas 1 a 202 means a
// replica held the vote, so the promoted replica has every vote answered
// 202: nothing may be lost. Without it, Redis replicates asynchronously:
// the failover may lose what the old master acknowledged and had not yet
// sent to its replica. That run records the loss in the table and says so
// in the log instead of failing (excuseLoss); nothing may be counted twice
// either way. Both end with the usual verification.

// redisFailoverTimes are a failover scenario's windows: it sends for
// send, and kills the master after between killAfter and killAfter+1s.
func redisFailoverTimes() (send, killAfter time.Duration) {
	if prof.name == "long" {
		return 30 * time.Second, 10 * time.Second
	}
	return 12 * time.Second, 2 * time.Second
}

// withAndWithoutWait runs scenario twice, as NAME-wait1 and NAME-nowait.
// The short profile runs only the cluster's wait1 (shortToo): a sentinel
// failover waits about 15s for the old master to be made a replica again,
// and make test must stay fast; make chaos runs all four.
func withAndWithoutWait(t *testing.T, shortToo bool, run func(t *testing.T, wait bool)) {
	for _, wait := range []bool{true, false} {
		name := "nowait"
		if wait {
			name = "wait1"
		}
		t.Run(name, func(t *testing.T) {
			if prof.name != "long" && !(shortToo && wait) {
				t.Skip("runs with the long profile only (TALLY_CHAOS=long, make chaos); the short profile runs redis-cluster-failover-wait1")
			}
			run(t, wait)
		})
	}
}

// 3 masters with a replica each; the master of stream shard 0 is killed,
// the cluster promotes its replica after the node timeout (1.5s).
func TestRedisClusterFailover(t *testing.T) {
	scenario(t)
	withAndWithoutWait(t, true, func(t *testing.T, wait bool) {
		f := startClusterFailover(t, !wait)
		runRedisFailover(t, "redis-cluster-failover", f, wait)
	})
}

// A master, a replica and 3 sentinels (down-after-milliseconds 1000,
// failover-timeout 3000); the master is killed, the sentinels promote
// the replica and the daemons' clients follow their announcement.
func TestRedisSentinelFailover(t *testing.T) {
	scenario(t)
	withAndWithoutWait(t, false, func(t *testing.T, wait bool) {
		f := startSentinelFailover(t, !wait)
		runRedisFailover(t, "redis-sentinel-failover", f, wait)
	})
}

// redisFailover is a Redis deployment with one master to fail over, and
// what a scenario does to it.
type redisFailover struct {
	deployment *redisDeployment
	// victim is the master to kill; victimShards the stream shards it
	// serves.
	victim       string
	victimShards map[int]bool
	kill         func()
	// promoted returns the master that serves the victim's shards now,
	// once it is not the victim and takes writes.
	promoted func(ctx context.Context) (string, bool)
	restart  func()
	// rejoined reports whether the victim replicates master, connected.
	rejoined func(ctx context.Context, master string) bool
}

// startClusterFailover starts a Redis Cluster of 3 masters with a replica
// each and a node timeout of 1.5s, and picks a stream prefix that puts one
// shard on each master (docs/operations.md, Redis deployments).
func startClusterFailover(t *testing.T, lossExpected bool) *redisFailover {
	rc := testenv.StartRedisCluster(t, 3, 1)
	rc.SetNodeTimeout(1500 * time.Millisecond)
	rdb := rc.Client()
	keys := spreadKeys(t, rdb, rc.Masters)
	ctx := context.Background()
	slot, err := rdb.ClusterKeySlot(ctx, keys.Stream(0)).Result()
	if err != nil {
		t.Fatal(err)
	}
	victim := rc.MasterOf(keys.Stream(0))
	f := &redisFailover{
		deployment: &redisDeployment{mode: "cluster", url: rc.URL(), rdb: rdb, keys: keys, lossExpected: lossExpected},
		victim:     victim, victimShards: map[int]bool{0: true},
		kill:    func() { rc.Kill(victim) },
		restart: func() { rc.Restart(victim) },
		rejoined: func(ctx context.Context, master string) bool {
			return replicates(ctx, victim, master)
		},
	}
	f.promoted = func(ctx context.Context) (string, bool) {
		for _, m := range rc.Masters {
			if m != victim {
				return slotMaster(ctx, m, slot, victim)
			}
		}
		return "", false
	}
	return f
}

// spreadKeys returns stream keys of one shard per master: a prefix tried
// until the hash tags of its shards land on distinct masters.
func spreadKeys(t *testing.T, rdb *redis.ClusterClient, masters []string) stream.Keys {
	t.Helper()
	ctx := context.Background()
	for range 200 {
		keys, err := stream.NewKeys(testenv.RandomName("chaos"), len(masters))
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for i := range keys.Shards() {
			m, err := rdb.MasterForKey(ctx, keys.Stream(i))
			if err != nil {
				t.Fatal(err)
			}
			seen[m.Options().Addr] = true
		}
		if len(seen) == len(masters) {
			return keys
		}
	}
	t.Fatalf("no prefix in 200 tries puts one shard on each of %d masters", len(masters))
	return stream.Keys{}
}

// slotMaster asks the node at addr which master serves slot, and returns
// it when it is not old and the node sees the cluster as ok.
func slotMaster(ctx context.Context, addr string, slot int64, old string) (string, bool) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	info, err := rdb.ClusterInfo(ctx).Result()
	if err != nil || !strings.Contains(info, "cluster_state:ok") {
		return "", false
	}
	shards, err := rdb.ClusterShards(ctx).Result()
	if err != nil {
		return "", false
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if slot < r.Start || slot > r.End {
				continue
			}
			for _, n := range sh.Nodes {
				a := net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
				if n.Role == "master" && n.Health == "online" && a != old {
					return a, true
				}
			}
		}
	}
	return "", false
}

// replicates reports whether the server at addr is a replica of master
// with its link up.
func replicates(ctx context.Context, addr, master string) bool {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	role, err := rdb.Do(ctx, "ROLE").Slice()
	return err == nil && len(role) >= 4 && role[0] == "slave" && role[3] == "connected" &&
		net.JoinHostPort(fmt.Sprint(role[1]), fmt.Sprint(role[2])) == master
}

// startSentinelFailover starts a master, a replica and 3 sentinels that
// deem the master down after 1s.
func startSentinelFailover(t *testing.T, lossExpected bool) *redisFailover {
	rs := testenv.StartRedisSentinel(t, 3)
	rs.SetTimeouts(time.Second, 3*time.Second)
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: testenv.SentinelMaster, SentinelAddrs: rs.Sentinels})
	t.Cleanup(func() { rdb.Close() })
	keys, err := stream.NewKeys(testenv.RandomName("chaos"), shards)
	if err != nil {
		t.Fatal(err)
	}
	victim := rs.Master()
	all := map[int]bool{}
	for i := range shards {
		all[i] = true
	}
	return &redisFailover{
		deployment: &redisDeployment{mode: "sentinel", url: rs.URL(), rdb: rdb, keys: keys, lossExpected: lossExpected},
		victim:     victim, victimShards: all,
		kill:    func() { rs.Kill(victim) },
		restart: func() { rs.Restart(victim) },
		promoted: func(ctx context.Context) (string, bool) {
			return sentinelMaster(ctx, rs.Sentinels, victim)
		},
		rejoined: func(ctx context.Context, master string) bool {
			return replicates(ctx, victim, master)
		},
	}
}

// sentinelMaster returns the master a majority of the sentinels name,
// once it is not old and answers as a master.
func sentinelMaster(ctx context.Context, sentinels []string, old string) (string, bool) {
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	named := map[string]int{}
	for _, a := range sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: a, MaxRetries: -1})
		got, err := sc.GetMasterAddrByName(ctx, testenv.SentinelMaster).Result()
		sc.Close()
		if err == nil && len(got) == 2 {
			named[net.JoinHostPort(got[0], got[1])]++
		}
	}
	for m, n := range named {
		if m == old || n <= len(sentinels)/2 {
			continue
		}
		rdb := redis.NewClient(&redis.Options{Addr: m, MaxRetries: -1})
		role, err := rdb.Do(ctx, "ROLE").Slice()
		rdb.Close()
		if err == nil && len(role) > 0 && role[0] == "master" {
			return m, true
		}
	}
	return "", false
}

// runRedisFailover runs one failover scenario on f's deployment: intake
// (with --redis-wait-replicas 1 when wait) and two projectors, the master
// killed mid load.
func runRedisFailover(t *testing.T, name string, f *redisFailover, wait bool) {
	opt := clusterOptions{intakes: 1, projectors: 2, redis: f.deployment}
	scenario := name + "-nowait"
	if wait {
		opt.intakeArgs = []string{"--redis-wait-replicas", "1"}
		scenario = name + "-wait1"
	}
	c := newCluster(t, opt)
	send, killAfter := redisFailoverTimes()
	run(t, c, scenario, send, func(ctx context.Context, ending func()) (int, string, error) {
		if !pause.For(ctx, between(killAfter, killAfter+time.Second)) {
			return 0, "", ctx.Err()
		}
		const limit = 60 * time.Second
		killed := time.Now()
		f.kill()
		type times struct{ anyAccepted, accepted, recorded string }
		watched := make(chan times, 1)
		go func() {
			all := watchFailover(ctx, c, nil, killed, limit)
			victim := watchFailover(ctx, c, f.victimShards, killed, limit)
			a, r := victim.wait(ctx)
			watched <- times{all.acceptedAfter(), a, r}
		}()
		master, promoted := waitUntil(ctx, limit, func(ctx context.Context) (string, bool) { return f.promoted(ctx) })
		if promoted < 0 {
			return 1, "", fmt.Errorf("no replica of %s promoted within %s", f.victim, limit)
		}
		f.restart()
		_, rejoined := waitUntil(ctx, limit, func(ctx context.Context) (string, bool) { return "", f.rejoined(ctx, master) })
		if rejoined >= 0 {
			rejoined += promoted
		}
		ending() // the deployment is whole again: a master and its replica
		w := <-watched
		note := ""
		if wait {
			note = " (with --redis-wait-replicas 1 an entry is written before WAIT: the first 202 on those shards also waited for the old master back as a replica)"
		}
		t.Logf("%s: master %s killed; %s promoted %s after the kill, the old master back as its replica %s after; "+
			"first vote accepted after the kill: %s on any shard, %s on the killed master's shards; first recorded of those %s%s",
			scenario, f.victim, master, promoted.Round(10*time.Millisecond), roundOrNot(rejoined, limit), w.anyAccepted, w.accepted, w.recorded, note)
		return 1, fmt.Sprintf("kill -9 master, replica promoted after %s (first accepted %s, first recorded %s after the kill)",
			promoted.Round(10*time.Millisecond), w.accepted, w.recorded), nil
	})
}

// waitUntil polls ok every 20ms for at most limit, and returns what it
// returned and how long after the start it first held (-1 if never).
func waitUntil(ctx context.Context, limit time.Duration, ok func(context.Context) (string, bool)) (string, time.Duration) {
	start := time.Now()
	for time.Since(start) < limit {
		if v, done := ok(ctx); done {
			return v, time.Since(start)
		}
		if !pause.For(ctx, 20*time.Millisecond) {
			break
		}
	}
	return "", -1
}

func roundOrNot(d, limit time.Duration) string {
	if d < 0 {
		return "not within " + limit.String()
	}
	return d.Round(10 * time.Millisecond).String()
}

// failoverWatch watches, from a kill on, for the first vote enqueued after
// it on some shards (a stream entry whose id, a Redis time in ms, is
// later) and the first of the votes intake received after it that the
// projectors record (a ledger row whose received_at and recorded_at are
// later: on the same machine, the same clock). A projector's batch read
// before the kill is recorded after it all the same, so rows received
// before the kill do not count.
type failoverWatch struct {
	c        *cluster
	shards   map[int]bool // nil: every shard
	from     time.Time
	limit    time.Duration
	accepted time.Time
	recorded time.Time
	done     chan struct{}
}

// watchFailover starts watching in the background; wait returns the
// figures.
func watchFailover(ctx context.Context, c *cluster, shards map[int]bool, from time.Time, limit time.Duration) *failoverWatch {
	w := &failoverWatch{c: c, shards: shards, from: from, limit: limit, done: make(chan struct{})}
	go w.poll(ctx)
	return w
}

func (w *failoverWatch) poll(ctx context.Context) {
	defer close(w.done)
	for time.Since(w.from) < w.limit && (w.accepted.IsZero() || w.recorded.IsZero()) {
		if w.accepted.IsZero() {
			w.accepted = w.firstEnqueued(ctx)
		}
		if w.recorded.IsZero() {
			w.recorded = w.firstRecorded(ctx)
		}
		if !pause.For(ctx, 20*time.Millisecond) {
			return
		}
	}
}

// firstEnqueued is the time of the earliest stream entry after from that
// is still in its stream, or else of the last one generated; zero if none
// is later than from.
func (w *failoverWatch) firstEnqueued(ctx context.Context) time.Time {
	var first time.Time
	after := func(id string) {
		ms, _, _ := strings.Cut(id, "-")
		n, err := strconv.ParseInt(ms, 10, 64)
		if err == nil && n > w.from.UnixMilli() && (first.IsZero() || n < first.UnixMilli()) {
			first = time.UnixMilli(n)
		}
	}
	for i := range w.c.keys.Shards() {
		if w.shards != nil && !w.shards[i] {
			continue
		}
		qctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		key := w.c.keys.Stream(i)
		if msgs, err := w.c.rdb.XRangeN(qctx, key, strconv.FormatInt(w.from.UnixMilli()+1, 10), "+", 1).Result(); err == nil && len(msgs) > 0 {
			after(msgs[0].ID)
		} else if info, err := w.c.rdb.XInfoStream(qctx, key).Result(); err == nil {
			after(info.LastGeneratedID)
		}
		cancel()
	}
	return first
}

// firstRecorded is the earliest recorded_at of the rows received after
// from, on the watched shards; zero if there is none yet.
func (w *failoverWatch) firstRecorded(ctx context.Context) time.Time {
	qctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	rows, err := w.c.pool.Query(qctx, `SELECT principal_id, min(recorded_at) FROM poll_events WHERE received_at > $1 GROUP BY principal_id`, w.from)
	if err != nil {
		return time.Time{}
	}
	defer rows.Close()
	var first time.Time
	for rows.Next() {
		var principal string
		var at time.Time
		if rows.Scan(&principal, &at) != nil {
			return time.Time{}
		}
		if (w.shards == nil || w.shards[w.c.keys.ShardOf(principal)]) && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	if rows.Err() != nil {
		return time.Time{}
	}
	return first
}

// wait waits for the watch to end and returns how long after from the
// first vote was accepted and recorded ("not within LIMIT" otherwise).
func (w *failoverWatch) wait(ctx context.Context) (accepted, recorded string) {
	select {
	case <-w.done:
	case <-ctx.Done():
	}
	return w.since(w.accepted), w.since(w.recorded)
}

func (w *failoverWatch) acceptedAfter() string {
	<-w.done
	return w.since(w.accepted)
}

func (w *failoverWatch) since(t time.Time) string {
	if t.IsZero() {
		return "not within " + w.limit.String()
	}
	return t.Sub(w.from).Round(10 * time.Millisecond).String()
}

// excuseLoss is rep as checkReport judges a run whose deployment may lose
// votes answered 202 (cluster.lossExpected). What the failover took is
// recorded in the table and said in the log rather than failed: the votes
// lost, the tallies short of them, and the effects of the idempotency
// records lost with them (a reused key accepted as new, and then an exact
// retry of the original refused as a reuse). Everything else, counted
// twice first, is judged as ever.
func excuseLoss(t *testing.T, scenario string, rep loadtest.Report) loadtest.Report {
	t.Helper()
	t.Logf("%s: Redis replicates asynchronously and intake did not WAIT for a replica: the failover lost %d of %d events answered 202 "+
		"(recorded as LOST in the table, not a failure); counted twice %d (must be 0)", scenario, rep.Lost, rep.AcceptedEvents, rep.CountedTwice)
	excused := []string{"lost: ", "key reuse answered 202 instead of 409", "exact retry of an accepted key not answered 202"}
	if rep.Lost > 0 {
		excused = append(excused, "the tallies differ from the ground truth")
	}
	kept := []string{}
	for _, f := range rep.Failures() {
		if slices.ContainsFunc(excused, func(p string) bool { return strings.HasPrefix(f, p) }) {
			t.Logf("%s: lost with the failover, not failed: %s", scenario, f)
			continue
		}
		kept = append(kept, f)
	}
	rep.FailureList = kept
	rep.Lost = 0
	return rep
}
