package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-retry"
)

// SentinelMaster is the master name a RedisSentinel set monitors.
const SentinelMaster = "tally"

// RedisSentinel is a private Redis with Sentinel of one test: a master, a
// replica and sentinels (redis-server --sentinel with a generated
// configuration), each on a loopback port of its own, with its files under
// t.TempDir(). It never touches the shared Redis; all are killed when the
// test ends.
type RedisSentinel struct {
	t testing.TB
	// Sentinels are the sentinels' addresses.
	Sentinels []string

	mu        sync.Mutex
	servers   map[string]*redisProcess // master and replica, by address
	sentinels []*redisProcess
}

// StartRedisSentinel starts a master with one replica and n sentinels
// (1 or 3; the quorum is a majority of them), and waits until every
// sentinel knows the master and its replica. The test fails, naming what
// to install, when redis-server is missing.
func StartRedisSentinel(t testing.TB, n int) *RedisSentinel {
	t.Helper()
	needRedisBinaries(t, "redis-server")
	s := &RedisSentinel{t: t, servers: map[string]*redisProcess{}}
	claimTempDir(t)
	t.Cleanup(s.stop)
	addrs := make([]string, 2+n)
	for i := range addrs {
		a, err := FreeAddr()
		if err != nil {
			t.Fatalf("find a free port: %v", err)
		}
		addrs[i] = a
	}
	master, replica := addrs[0], addrs[1]
	mhost, mport, _ := net.SplitHostPort(master)
	durable := []string{"--appendonly", "yes", "--appendfsync", "always", "--save", ""}
	s.servers[master] = startRedisProcess(t, master, durable...)
	s.servers[replica] = startRedisProcess(t, replica, append(durable, "--replicaof", mhost, mport)...)
	for _, a := range addrs[2:] {
		s.sentinels = append(s.sentinels, s.startSentinel(a, master, n/2+1))
		s.Sentinels = append(s.Sentinels, a)
	}
	s.waitReady(master, replica)
	return s
}

// startSentinel starts a sentinel on addr monitoring master with quorum.
func (s *RedisSentinel) startSentinel(addr, master string, quorum int) *redisProcess {
	s.t.Helper()
	dir := s.t.TempDir()
	host, port, _ := net.SplitHostPort(addr)
	mhost, mport, _ := net.SplitHostPort(master)
	conf := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf("port %s\nbind %s\ndir %s\nlogfile %s\n"+
		"sentinel monitor %s %s %s %d\n"+
		"sentinel down-after-milliseconds %[5]s 2000\n"+
		"sentinel failover-timeout %[5]s 10000\n",
		port, host, dir, filepath.Join(dir, "redis.log"), SentinelMaster, mhost, mport, quorum)
	// A sentinel rewrites its configuration file, so it must be writable.
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		s.t.Fatal(err)
	}
	return startRedisWith(s.t, addr, dir, conf, "--sentinel")
}

// waitReady waits until every sentinel names master as the master and
// lists replica among its replicas.
func (s *RedisSentinel) waitReady(master, replica string) {
	s.t.Helper()
	var last error
	err := retry.Do(context.Background(), retry.WithMaxDuration(60*time.Second, retry.NewConstant(100*time.Millisecond)),
		func(ctx context.Context) error {
			last = s.check(ctx, master, replica)
			return retry.RetryableError(last)
		})
	if err != nil {
		s.t.Fatalf("the sentinels did not see the master %s and its replica %s within 60s: %v", master, replica, last)
	}
}

func (s *RedisSentinel) check(ctx context.Context, master, replica string) error {
	rc := redis.NewClient(&redis.Options{Addr: replica, MaxRetries: -1})
	role, err := rc.Do(ctx, "ROLE").Slice()
	rc.Close()
	if err != nil || len(role) < 4 || role[0] != "slave" || role[3] != "connected" ||
		net.JoinHostPort(fmt.Sprint(role[1]), fmt.Sprint(role[2])) != master {
		return fmt.Errorf("%s is not a connected replica of %s: ROLE %v %v", replica, master, role, err)
	}
	for _, a := range s.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: a, MaxRetries: -1})
		got, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
		if err != nil {
			sc.Close()
			return fmt.Errorf("sentinel %s: %w", a, err)
		}
		if net.JoinHostPort(got[0], got[1]) != master {
			sc.Close()
			return fmt.Errorf("sentinel %s names master %v, want %s", a, got, master)
		}
		replicas, err := sc.Replicas(ctx, SentinelMaster).Result()
		sc.Close()
		if err != nil {
			return fmt.Errorf("sentinel %s: %w", a, err)
		}
		found := false
		for _, r := range replicas {
			found = found || r["name"] == replica && !strings.Contains(r["flags"], "down") && !strings.Contains(r["flags"], "disconnected")
		}
		if !found {
			return fmt.Errorf("sentinel %s does not list replica %s up: %v", a, replica, replicas)
		}
	}
	return nil
}

// URL is the set in go-redis' Sentinel URL form: the first sentinel, the
// master's name and every other sentinel as an addr parameter
// (redis.ParseFailoverURL).
func (s *RedisSentinel) URL() string {
	u := "redis://" + s.Sentinels[0] + "/0?master_name=" + SentinelMaster
	for _, a := range s.Sentinels[1:] {
		u += "&addr=" + a
	}
	return u
}

// Master is the address the first sentinel names as the master.
func (s *RedisSentinel) Master() string {
	s.t.Helper()
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinels[0]})
	defer sc.Close()
	got, err := sc.GetMasterAddrByName(context.Background(), SentinelMaster).Result()
	if err != nil {
		s.t.Fatalf("ask sentinel %s for the master: %v", s.Sentinels[0], err)
	}
	return net.JoinHostPort(got[0], got[1])
}

// Failover makes the sentinels promote the replica (SENTINEL FAILOVER)
// and waits until every sentinel names it, and the former master
// replicates from it.
func (s *RedisSentinel) Failover() {
	s.t.Helper()
	old := s.Master()
	var promoted string
	for a := range s.servers {
		if a != old {
			promoted = a
		}
	}
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinels[0]})
	defer sc.Close()
	if err := sc.Failover(context.Background(), SentinelMaster).Err(); err != nil {
		s.t.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	s.waitReady(promoted, old)
}

// SetTimeouts sets, on every sentinel, down-after-milliseconds (how long
// the master may not answer before it is deemed down) and failover-timeout
// (how long a failover may take before another is tried).
// StartRedisSentinel uses 2s and 10s.
func (s *RedisSentinel) SetTimeouts(downAfter, failover time.Duration) {
	s.t.Helper()
	for _, a := range s.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: a})
		err := sc.Set(context.Background(), SentinelMaster, "down-after-milliseconds", strconv.FormatInt(downAfter.Milliseconds(), 10)).Err()
		if err == nil {
			err = sc.Set(context.Background(), SentinelMaster, "failover-timeout", strconv.FormatInt(failover.Milliseconds(), 10)).Err()
		}
		sc.Close()
		if err != nil {
			s.t.Fatalf("sentinel %s: SENTINEL SET: %v", a, err)
		}
	}
}

// Kill stops the server (master or replica) at addr with SIGKILL, as a
// crash would.
func (s *RedisSentinel) Kill(addr string) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.servers[addr]
	if !ok || p.cmd == nil {
		s.t.Fatalf("no running Redis server at %s", addr)
	}
	p.kill()
}

// Restart starts a server Kill stopped again on its files. The sentinels
// make a former master that finds another promoted its replica.
func (s *RedisSentinel) Restart(addr string) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.servers[addr]
	if !ok || p.cmd != nil {
		s.t.Fatalf("no stopped Redis server at %s", addr)
	}
	s.servers[addr] = startRedisWith(s.t, p.addr, p.dir, p.args...)
}

func (s *RedisSentinel) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.sentinels {
		p.kill()
	}
	for _, p := range s.servers {
		p.kill()
	}
}
