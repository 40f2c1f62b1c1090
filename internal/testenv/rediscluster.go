package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-retry"
)

// RedisCluster is a private Redis Cluster of one test: redis-server
// processes started with cluster-enabled on loopback ports of their own,
// joined by redis-cli --cluster create. It never touches the shared Redis.
// Every node keeps its files under t.TempDir() and runs with appendonly
// yes and appendfsync always; all are killed when the test ends.
type RedisCluster struct {
	t testing.TB
	// Masters are the masters' addresses (127.0.0.1:PORT), in the order
	// of the slot ranges they serve.
	Masters []string
	// Replicas maps a master's address to its replicas' addresses.
	Replicas map[string][]string

	mu    sync.Mutex
	nodes map[string]*redisProcess // by address
	addrs []string                 // every node, in start order
}

// redisProcess is one redis-server (or sentinel) a test started.
type redisProcess struct {
	addr string
	dir  string
	args []string // redis-server's, to start it again
	cmd  *exec.Cmd
}

// StartRedisCluster starts a Redis Cluster of masters masters, each with
// replicas replicas, and waits until every node agrees that all 16384
// slots are served and every replica is attached to its master. The test
// fails, naming what to install, when redis-server or redis-cli is
// missing.
func StartRedisCluster(t testing.TB, masters, replicas int) *RedisCluster {
	t.Helper()
	needRedisBinaries(t, "redis-server", "redis-cli")
	if masters < 3 {
		t.Fatalf("a Redis Cluster needs at least 3 masters, got %d", masters)
	}
	c := &RedisCluster{t: t, Replicas: map[string][]string{}, nodes: map[string]*redisProcess{}}
	claimTempDir(t)
	t.Cleanup(c.stop)
	for range masters * (1 + replicas) {
		port, err := freePort()
		if err != nil {
			t.Fatalf("find a free port: %v", err)
		}
		busPort, err := freePort()
		if err != nil {
			t.Fatalf("find a free port: %v", err)
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		c.nodes[addr] = startRedisProcess(t, addr,
			"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(busPort),
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000",
			"--appendonly", "yes", "--appendfsync", "always", "--save", "")
		c.addrs = append(c.addrs, addr)
	}
	args := append([]string{"--cluster", "create"}, c.addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c.waitReady(masters, replicas)
	return c
}

// needRedisBinaries fails t, saying which package to install, when one of
// names is not on PATH.
func needRedisBinaries(t testing.TB, names ...string) {
	t.Helper()
	for _, name := range names {
		if _, err := exec.LookPath(name); err != nil {
			pkg := "redis-server"
			if name == "redis-cli" {
				pkg = "redis-tools"
			}
			t.Fatalf("%s is not installed (apt-get install %s): %v", name, pkg, err)
		}
	}
}

// startRedisProcess starts redis-server on addr with args, its files in a
// directory of its own, and waits until it answers PING.
func startRedisProcess(t testing.TB, addr string, args ...string) *redisProcess {
	t.Helper()
	dir := t.TempDir()
	_, port, _ := net.SplitHostPort(addr)
	return startRedisWith(t, addr, dir, append([]string{"--bind", "127.0.0.1", "--port", port, "--dir", dir,
		"--logfile", filepath.Join(dir, "redis.log")}, args...)...)
}

// startRedisWith starts redis-server with args (a configuration file
// first, if any), serving on addr with its log in dir, and waits until it
// answers PING.
func startRedisWith(t testing.TB, addr, dir string, args ...string) *redisProcess {
	t.Helper()
	p := &redisProcess{addr: addr, dir: dir, args: args}
	p.cmd = exec.Command("redis-server", args...)
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start redis-server on %s: %v", addr, err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	err := retry.Do(context.Background(), retry.WithMaxDuration(10*time.Second, retry.NewConstant(20*time.Millisecond)),
		func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			return retry.RetryableError(rdb.Ping(ctx).Err())
		})
	if err != nil {
		p.kill()
		t.Fatalf("redis-server on %s did not answer within 10s: %v\n%s", addr, err, p.log())
	}
	return p
}

// claimTempDir makes t's temporary directory before the caller registers
// the cleanup that kills its servers. Cleanups run last in, first out,
// and t.TempDir registers the removal of that directory at its first
// call: made later, by the first server's start, the directory would be
// removed while the servers still ran, and a server writing its
// append-only file fails the removal ("directory not empty").
func claimTempDir(t testing.TB) { t.TempDir() }

func (p *redisProcess) log() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "redis.log"))
	return string(b)
}

func (p *redisProcess) kill() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT) // a paused process dies all the same
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	p.cmd = nil
}

// waitReady waits until every node reports cluster_state:ok with the
// expected numbers of masters, and every master its replicas online.
func (c *RedisCluster) waitReady(masters, replicas int) {
	c.t.Helper()
	ctx := context.Background()
	var last error
	err := retry.Do(ctx, retry.WithMaxDuration(60*time.Second, retry.NewConstant(100*time.Millisecond)),
		func(ctx context.Context) error {
			last = c.readTopology(ctx, masters, replicas)
			return retry.RetryableError(last)
		})
	if err != nil {
		c.t.Fatalf("the Redis Cluster did not become ready within 60s: %v", last)
	}
}

// readTopology checks every node's view of the cluster and records which
// node serves which slots and replicates which master.
func (c *RedisCluster) readTopology(ctx context.Context, masters, replicas int) error {
	repl := map[string][]string{}
	for addr := range c.nodes {
		master, err := nodeReady(ctx, addr, masters, replicas)
		if err != nil {
			return err
		}
		if master != "" {
			repl[master] = append(repl[master], addr)
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: c.addrs[0], MaxRetries: -1})
	defer rdb.Close()
	shards, err := rdb.ClusterShards(ctx).Result()
	if err != nil {
		return fmt.Errorf("CLUSTER SHARDS: %w", err)
	}
	type served struct {
		first int64
		addr  string
	}
	var byFirstSlot []served
	for _, sh := range shards {
		for _, n := range sh.Nodes {
			if n.Role == "master" && len(sh.Slots) > 0 {
				byFirstSlot = append(byFirstSlot, served{sh.Slots[0].Start, net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))})
			}
		}
	}
	slices.SortFunc(byFirstSlot, func(a, b served) int { return int(a.first - b.first) })
	var ms []string
	for _, s := range byFirstSlot {
		ms = append(ms, s.addr)
	}
	if len(ms) != masters {
		return fmt.Errorf("CLUSTER SLOTS names %d masters, want %d", len(ms), masters)
	}
	c.mu.Lock()
	c.Masters, c.Replicas = ms, repl
	c.mu.Unlock()
	return nil
}

// nodeReady checks that the node at addr sees a healthy cluster of masters
// masters, and, a master, that it has replicas replicas attached; a
// replica, that it is connected to its master, whose address it gives.
func nodeReady(ctx context.Context, addr string, masters, replicas int) (master string, err error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	info, err := rdb.ClusterInfo(ctx).Result()
	if err != nil {
		return "", fmt.Errorf("%s: CLUSTER INFO: %w", addr, err)
	}
	if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_size:"+strconv.Itoa(masters)) {
		return "", fmt.Errorf("%s: not ready:\n%s", addr, info)
	}
	role, err := rdb.Do(ctx, "ROLE").Slice()
	if err != nil || len(role) < 3 || role[0] == "slave" && len(role) < 4 {
		return "", fmt.Errorf("%s: ROLE: %v %v", addr, role, err)
	}
	switch role[0] {
	case "master":
		if attached, _ := role[2].([]any); len(attached) < replicas {
			return "", fmt.Errorf("%s: %d of %d replicas attached", addr, len(attached), replicas)
		}
	case "slave":
		if state, _ := role[3].(string); state != "connected" {
			return "", fmt.Errorf("%s: replica state %v", addr, role[3])
		}
		return net.JoinHostPort(fmt.Sprint(role[1]), fmt.Sprint(role[2])), nil
	}
	return "", nil
}

// URL is the cluster in go-redis' cluster URL form: the first master, and
// every other master as an addr parameter (redis.ParseClusterURL).
func (c *RedisCluster) URL() string {
	u := "redis://" + c.Masters[0]
	for i, a := range c.Masters[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=" + a
	}
	return u
}

// Client is a cluster client of every node, closed when the test ends.
func (c *RedisCluster) Client() *redis.ClusterClient {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Masters})
	c.t.Cleanup(func() { rdb.Close() })
	return rdb
}

// MasterOf is the address of the master serving key's slot.
func (c *RedisCluster) MasterOf(key string) string {
	c.t.Helper()
	rdb := c.Client()
	m, err := rdb.MasterForKey(context.Background(), key)
	if err != nil {
		c.t.Fatalf("master of %s: %v", key, err)
	}
	return m.Options().Addr
}

// Pause stops the node at addr with SIGSTOP: it keeps its connections and
// answers nothing (a replica stops acknowledging writes) until Resume.
func (c *RedisCluster) Pause(addr string) { c.signal(addr, syscall.SIGSTOP) }

// Resume continues a node Pause stopped.
func (c *RedisCluster) Resume(addr string) { c.signal(addr, syscall.SIGCONT) }

func (c *RedisCluster) signal(addr string, sig syscall.Signal) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.running(addr).cmd.Process.Signal(sig); err != nil {
		c.t.Fatalf("signal %s: %v", addr, err)
	}
}

// SetNodeTimeout sets cluster-node-timeout on every running node (and on
// a node Restart starts again): how long a master may not answer before
// its replica is promoted. StartRedisCluster's nodes use 5s.
func (c *RedisCluster) SetNodeTimeout(d time.Duration) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	ms := strconv.FormatInt(d.Milliseconds(), 10)
	for addr, p := range c.nodes {
		if p.cmd == nil {
			continue
		}
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		err := rdb.ConfigSet(context.Background(), "cluster-node-timeout", ms).Err()
		rdb.Close()
		if err != nil {
			c.t.Fatalf("%s: CONFIG SET cluster-node-timeout %s: %v", addr, ms, err)
		}
		p.args = append(p.args, "--cluster-node-timeout", ms) // the last one counts
	}
}

// Kill stops the node at addr with SIGKILL, as a crash would. Its
// replica is promoted once the other masters have not heard from it for
// the node timeout.
func (c *RedisCluster) Kill(addr string) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running(addr).kill()
}

// running is the running node at addr; it fails the test when there is
// none. The caller holds c.mu.
func (c *RedisCluster) running(addr string) *redisProcess {
	c.t.Helper()
	p, ok := c.nodes[addr]
	if !ok || p.cmd == nil {
		c.t.Fatalf("no running cluster node at %s", addr)
	}
	return p
}

// Restart starts a node Kill stopped again on its files. A master whose
// replica was promoted meanwhile rejoins as that replica's replica.
func (c *RedisCluster) Restart(addr string) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.nodes[addr]
	if !ok || p.cmd != nil {
		c.t.Fatalf("no stopped cluster node at %s", addr)
	}
	c.nodes[addr] = startRedisWith(c.t, p.addr, p.dir, p.args...)
}

// stop kills every node.
func (c *RedisCluster) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.nodes {
		p.kill()
	}
}
