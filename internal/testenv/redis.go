package testenv

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Redis returns a client of the shared Redis and a key prefix unique to t;
// every key under the prefix's hash tags is deleted when t ends.
func Redis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	opt, err := redis.ParseURL(RedisURL())
	if err != nil {
		t.Fatalf("TALLY_TEST_REDIS_URL: %v", err)
	}
	rdb := redis.NewClient(opt)
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("connect to the test Redis at %s (set TALLY_TEST_REDIS_URL): %v", RedisURL(), err)
	}
	prefix := RandomName("t")
	t.Cleanup(func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, "{"+prefix+":*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
		rdb.Close()
	})
	return rdb, prefix
}
