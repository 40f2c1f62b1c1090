package cli

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tally/internal/testenv"
)

// TestRedisLogJSON makes go-redis log a failed dial through redisLog on a
// JSON handler, as tally intake --log-format json does: the line is JSON,
// a warning of component redis.
func TestRedisLogJSON(t *testing.T) {
	var out testenv.LogBuffer
	redis.SetLogger(redisLog{slog.New(slog.NewJSONHandler(&out, nil)).With(slog.String("component", "redis"))})
	t.Cleanup(func() { redis.SetLogger(redisLog{slog.New(slog.DiscardHandler)}) })
	addr, err := testenv.FreeAddr() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatalf("PING to %s answered", addr)
	}
	var found bool
	for line := range strings.Lines(out.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("go-redis logged a line that is not JSON: %q", line)
		}
		msg, _ := rec["msg"].(string)
		if strings.Contains(msg, "failed to dial") {
			found = rec["level"] == "WARN" && rec["component"] == "redis"
		}
	}
	if !found {
		t.Fatalf("no JSON warning of component redis about the failed dial in %q", out.String())
	}
}
