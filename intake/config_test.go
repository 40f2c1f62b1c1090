package intake_test

import (
	"errors"
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
		cfg   intake.Config
		field string
		want  string
	}{
		{intake.Config{Rate: -1}, "Rate", "the votes per second of one principal must be above 0"},
		{intake.Config{Burst: -1}, "Burst", "the burst of votes of one principal must be between 1 and 1000000, got -1"},
		{intake.Config{MaxBacklog: -5}, "MaxBacklog", "the backlog bound must be at least 1 entry, got -5"},
		{intake.Config{IdempotencyWindow: time.Millisecond}, "IdempotencyWindow", "the idempotency window must be at least 1s, got 1ms"},
		{intake.Config{WaitReplicas: -1}, "WaitReplicas", "the replicas a vote waits for must be 0 (off) or more, got -1"},
		{intake.Config{EnqueuePipelines: 2000}, "EnqueuePipelines", "must be between 1 and 1024, got 2000"},
		{intake.Config{EnqueueBatch: -1}, "EnqueueBatch", "must be between 1 and 10000, got -1"},
		{intake.Config{BreakerFailures: -1}, "BreakerFailures", "must be at least 1, got -1"},
		{intake.Config{MaxHeaderBytes: 10}, "MaxHeaderBytes", "the request headers bound must be at least 1024 bytes, got 10"},
		{intake.Config{ReadTimeout: -time.Second}, "ReadTimeout", "the read timeout must not be negative, got -1s"},
		{intake.Config{RequestTimeout: time.Minute, WriteTimeout: time.Second}, "RequestTimeout", "the request timeout (1m0s) must not exceed the write timeout (1s)"},
		{intake.Config{MaxConnsPerAddr: -2}, "MaxConnsPerAddr", "at least 1, or -1 for no bound, got -2"},
		{intake.Config{MaxLivePerPrincipal: -3}, "MaxLivePerPrincipal", "at least 1, or -1 for no bound, got -3"},
		{intake.Config{TLSCertFile: "cert.pem"}, "TLSCertFile", "the TLS certificate and key files go together"},
		{intake.Config{MaxConns: 10, MaxLiveViewers: 10}, "MaxLiveViewers", "below the connection bound (10)"},
	} {
		_, err := intake.New(tc.cfg, store, rdb, keys, nil, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
		var ce *intake.ConfigError
		if !errors.As(tc.cfg.Validate(), &ce) || ce.ConfigField() != tc.field {
			t.Errorf("Validate(%+v): the error names field %v, want %s", tc.cfg, ce, tc.field)
		}
		if strings.Contains(err.Error(), tc.field) {
			t.Errorf("New(%+v) = %v: the message names the Go field %s; it should name the setting in words", tc.cfg, err, tc.field)
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
