package testenv

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestRedisCluster starts a cluster of 3 masters with a replica each and
// checks that a client of its URL reaches every master.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	c := StartRedisCluster(t, 3, 1)
	if len(c.Masters) != 3 {
		t.Fatalf("masters %v, want 3", c.Masters)
	}
	for _, m := range c.Masters {
		if len(c.Replicas[m]) != 1 {
			t.Fatalf("replicas of %s: %v, want 1", m, c.Replicas[m])
		}
	}
	opt, err := redis.ParseClusterURL(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClusterClient(opt)
	defer rdb.Close()
	ctx := context.Background()
	seen := map[string]bool{}
	for i := range 64 {
		key := "{k" + string(rune('a'+i%26)) + string(rune('a'+i/26)) + "}"
		if err := rdb.Set(ctx, key, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		seen[c.MasterOf(key)] = true
	}
	if len(seen) != 3 {
		t.Fatalf("64 keys landed on %d masters, want 3", len(seen))
	}
}

// TestRedisSentinel starts a master, a replica and three sentinels, reaches
// the master through a client of the set's URL, and fails over.
func TestRedisSentinel(t *testing.T) {
	t.Parallel()
	s := StartRedisSentinel(t, 3)
	opt, err := redis.ParseFailoverURL(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewFailoverClient(opt)
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	before := s.Master()
	s.Failover()
	if after := s.Master(); after == before {
		t.Fatalf("the master is still %s after a failover", after)
	}
	if v, err := rdb.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("after the failover: %q, %v", v, err)
	}
}
