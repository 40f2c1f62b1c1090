package intake_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tally/intake"
	"tally/ledger"
	"tally/stream"
)

// TestConfigValidate checks that New refuses each invalid setting with an
// error that names it, and takes the defaults.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	keys, _ := stream.NewKeys("x", 1)
	store, _ := ledger.New(nil, ledger.Config{})
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	for _, tc := range []struct {
		cfg  intake.Config
		want string
	}{
		{intake.Config{Rate: -1}, "Rate must be above 0"},
		{intake.Config{Burst: -1}, "Burst must be between 1 and 1000000, got -1"},
		{intake.Config{MaxBacklog: -5}, "MaxBacklog must be at least 1, got -5"},
		{intake.Config{IdempotencyWindow: time.Millisecond}, "IdempotencyWindow must be at least 1s, got 1ms"},
		{intake.Config{WaitReplicas: -1}, "WaitReplicas must be 0 (off) or more, got -1"},
		{intake.Config{EnqueuePipelines: 2000}, "EnqueuePipelines must be between 1 and 1024, got 2000"},
		{intake.Config{EnqueueBatch: -1}, "EnqueueBatch must be between 1 and 10000, got -1"},
		{intake.Config{BreakerFailures: -1}, "BreakerFailures must be at least 1, got -1"},
		{intake.Config{MaxHeaderBytes: 10}, "MaxHeaderBytes must be at least 1024, got 10"},
		{intake.Config{ReadTimeout: -time.Second}, "ReadTimeout must not be negative, got -1s"},
		{intake.Config{RequestTimeout: time.Minute, WriteTimeout: time.Second}, "RequestTimeout (1m0s) must not exceed WriteTimeout (1s)"},
	} {
		_, err := intake.New(tc.cfg, store, rdb, keys, nil, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := intake.New(intake.Config{}, store, rdb, keys, nil, nil); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if _, err := intake.New(intake.DefaultConfig(), store, rdb, keys, nil, nil); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	if _, err := intake.New(intake.Config{}, store, rdb, stream.Keys{}, nil, nil); err == nil || !strings.Contains(err.Error(), "stream keys are not set") {
		t.Fatalf("zero stream keys: %v, want an error that says they are not set", err)
	}
	if _, err := intake.New(intake.Config{}, nil, rdb, keys, nil, nil); err == nil || !strings.Contains(err.Error(), "ledger store and a Redis client are required") {
		t.Fatalf("no store: %v, want an error that says it is required", err)
	}
}
