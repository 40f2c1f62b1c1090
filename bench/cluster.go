package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-retry"

	"tally/stream"
)

// This file owns EC: E against a private Redis Cluster of three masters,
// started on loopback ports of its own with the persistence settings of
// the shared Redis, next to E on the shared Redis in the same run.

// clusterMasters is the number of masters of EC's cluster, and its
// --shards: one shard per master, on a stream prefix whose hash tags land
// one on each (docs/operations.md, Redis deployments).
const clusterMasters = 3

// measureCluster: EC, and E when this run has not measured it yet.
func measureCluster(ctx context.Context, e *env, sz sizes, t *table) error {
	if _, ok := t.get("E"); !ok {
		if err := measureEndToEnd(ctx, e, sz, t); err != nil {
			return fmt.Errorf("the baseline of EC (E): %w", err)
		}
	}
	load := loadAvg()
	began := time.Now()
	c, err := e.startCluster(ctx, clusterMasters, sz.clusterReplicas)
	if err != nil {
		return err
	}
	defer c.stop()
	fmt.Fprintf(os.Stderr, "bench: cluster: %d nodes ready in %s\n", len(c.nodes), time.Since(began).Round(100*time.Millisecond))
	prefix, err := c.spreadPrefix(ctx, e.run+"ec", clusterMasters)
	if err != nil {
		return err
	}
	redisFlags := []string{"--redis-mode", "cluster", "--redis-url", c.url(), "--stream-prefix", prefix, "--shards", itoa(clusterMasters)}
	r, err := e.loadPipeline(ctx, "ec", "127.0.0.1:18193", redisFlags, sz.e2eFor, 32)
	if err != nil {
		return err
	}
	replicas := "no replicas"
	if sz.clusterReplicas > 0 {
		replicas = fmt.Sprintf("%d replica(s) each, asynchronous", sz.clusterReplicas)
	}
	t.add(fig{id: "EC", what: fmt.Sprintf("end to end as E against a Redis Cluster of %d masters (%s) on this host, --shards %d, one per master",
		clusterMasters, replicas, clusterMasters),
		value: r.rate, unit: "votes/s", extra: fmt.Sprintf("accept-to-recorded p50 %.0f ms, p99 %.0f ms", r.p50, r.p99),
		load: load, command: strings.TrimSuffix(r.command, ")") + "; all three with --redis-mode cluster --shards 3 and a --stream-prefix with one tag per master)"})
	return nil
}

// redisCluster is a Redis Cluster the bench started: redis-server
// processes with cluster-enabled on free loopback ports, their files under
// the run's scratch directory, joined by redis-cli --cluster create.
type redisCluster struct {
	nodes   []*proc
	addrs   []string // every node, masters first as --cluster create makes them
	masters []string // the masters' addresses, by slot range
}

// startCluster starts masters masters with replicas replicas each, with
// the shared Redis' persistence settings, and waits until every node
// agrees that all slots are served and each replica is attached.
func (e *env) startCluster(ctx context.Context, masters, replicas int) (_ *redisCluster, err error) {
	for _, name := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(name); err != nil {
			return nil, fmt.Errorf("%s is not installed (apt-get install redis-server redis-tools): %w", name, err)
		}
	}
	c := &redisCluster{}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	persistence := e.redisPersistence(ctx)
	ports, err := freePorts(2 * masters * (1 + replicas))
	if err != nil {
		return nil, err
	}
	for i := 0; i < len(ports); i += 2 {
		port, bus := ports[i], ports[i+1]
		addr := "127.0.0.1:" + itoa(port)
		dir := filepath.Join(e.tmp, "redis-"+itoa(port))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		args := append([]string{"redis-server", "--bind", "127.0.0.1", "--port", itoa(port), "--dir", dir,
			"--logfile", filepath.Join(dir, "redis.log"), "--cluster-enabled", "yes", "--cluster-port", itoa(bus),
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000"}, persistence...)
		p, err := start(ctx, logFile, args...)
		if err != nil {
			return nil, err
		}
		c.nodes, c.addrs = append(c.nodes, p), append(c.addrs, addr)
	}
	for _, addr := range c.addrs {
		if err := waitPing(ctx, addr); err != nil {
			return nil, err
		}
	}
	args := append(append([]string{"--cluster", "create"}, c.addrs...), "--cluster-replicas", itoa(replicas), "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
	}
	if err := c.waitReady(ctx, masters, replicas); err != nil {
		return nil, err
	}
	return c, nil
}

// redisPersistence is the shared Redis' appendonly, appendfsync and save
// settings as redis-server flags, so that EC's nodes write to disk as E's
// server does; none when it does not say.
func (e *env) redisPersistence(ctx context.Context) []string {
	var args []string
	for _, k := range []string{"appendonly", "appendfsync", "save"} {
		v, err := e.rdb.ConfigGet(ctx, k).Result()
		if err != nil {
			return nil
		}
		if val, ok := v[k]; ok {
			args = append(args, "--"+k, val)
		}
	}
	return args
}

// freePorts are n distinct loopback ports free now: each is held until
// all are found.
func freePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// waitPing waits up to 10s until the Redis on addr answers PING: until
// it accepts a connection, then its answer.
func waitPing(ctx context.Context, addr string) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	var d net.Dialer
	err := retry.Do(ctx, retry.WithMaxDuration(10*time.Second, retry.NewConstant(20*time.Millisecond)), func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		// A dial first: go-redis logs every connection refused.
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return retry.RetryableError(err)
		}
		conn.Close()
		return retry.RetryableError(rdb.Ping(ctx).Err())
	})
	if err != nil {
		return fmt.Errorf("redis-server on %s did not answer within 10s: %w", addr, err)
	}
	return nil
}

// waitReady waits up to 60s until every node reports cluster_state:ok
// with masters masters, and every slot range has its master and replicas
// replicas online; it records the masters by slot range.
func (c *redisCluster) waitReady(ctx context.Context, masters, replicas int) error {
	var last error
	err := retry.Do(ctx, retry.WithMaxDuration(60*time.Second, retry.NewConstant(100*time.Millisecond)), func(ctx context.Context) error {
		last = c.readTopology(ctx, masters, replicas)
		return retry.RetryableError(last)
	})
	if err != nil && last != nil {
		return fmt.Errorf("the Redis Cluster did not become ready within 60s: %w", last)
	}
	return err
}

func (c *redisCluster) readTopology(ctx context.Context, masters, replicas int) error {
	for _, addr := range c.addrs {
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		info, err := rdb.ClusterInfo(ctx).Result()
		rdb.Close()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER INFO: %w", addr, err)
		}
		if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_size:"+itoa(masters)) {
			return fmt.Errorf("%s: not ready:\n%s", addr, info)
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: c.addrs[0], MaxRetries: -1})
	defer rdb.Close()
	shards, err := rdb.ClusterShards(ctx).Result()
	if err != nil {
		return fmt.Errorf("CLUSTER SHARDS: %w", err)
	}
	var ms []string
	first := map[string]int64{}
	for _, sh := range shards {
		online := 0
		master := ""
		for _, n := range sh.Nodes {
			switch {
			case n.Role == "master" && len(sh.Slots) > 0:
				master = net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
				first[master] = sh.Slots[0].Start
			case n.Role == "replica" && n.Health == "online":
				online++
			}
		}
		if master == "" {
			continue
		}
		if online < replicas {
			return fmt.Errorf("master %s: %d of %d replicas online", master, online, replicas)
		}
		ms = append(ms, master)
	}
	if len(ms) != masters {
		return fmt.Errorf("CLUSTER SHARDS names %d masters, want %d", len(ms), masters)
	}
	slices.SortFunc(ms, func(a, b string) int { return cmp.Compare(first[a], first[b]) })
	c.masters = ms
	return nil
}

// spreadPrefix is the first stream prefix base, base1, base2, ... whose
// hash tags {PREFIX:0} to {PREFIX:shards-1} land evenly on the masters,
// asked of the cluster (CLUSTER KEYSLOT and its slot ranges), as
// docs/operations.md recommends.
func (c *redisCluster) spreadPrefix(ctx context.Context, base string, shards int) (string, error) {
	rdb := redis.NewClient(&redis.Options{Addr: c.masters[0]})
	defer rdb.Close()
	ranges, err := rdb.ClusterShards(ctx).Result()
	if err != nil {
		return "", fmt.Errorf("CLUSTER SHARDS: %w", err)
	}
	masterOf := func(slot int64) string {
		for _, sh := range ranges {
			for _, r := range sh.Slots {
				if slot >= r.Start && slot <= r.End {
					for _, n := range sh.Nodes {
						if n.Role == "master" {
							return net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
						}
					}
				}
			}
		}
		return ""
	}
	for i := range 1000 {
		prefix := base + itoa(i)
		keys, err := stream.NewKeys(prefix, shards)
		if err != nil {
			return "", err
		}
		per := map[string]int{}
		for s := range shards {
			slot, err := rdb.ClusterKeySlot(ctx, keys.Stream(s)).Result()
			if err != nil {
				return "", fmt.Errorf("CLUSTER KEYSLOT: %w", err)
			}
			per[masterOf(slot)]++
		}
		even := len(per) == len(c.masters)
		for _, n := range per {
			even = even && n == shards/len(c.masters)
		}
		if even {
			return prefix, nil
		}
	}
	return "", errors.New("no stream prefix of 1000 tried spreads the shards evenly over the masters")
}

// url is the cluster in go-redis' cluster URL form: the first master, and
// every other one as an addr parameter.
func (c *redisCluster) url() string {
	u := "redis://" + c.masters[0]
	for i, a := range c.masters[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=" + a
	}
	return u
}

// stop stops every node.
func (c *redisCluster) stop() {
	for _, p := range c.nodes {
		p.stop()
	}
}
