package intake_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"tally/intake"
	"tally/internal/testenv"
	"tally/ledger"
	"tally/stream"
)

// This file tests /readyz: what it says when PostgreSQL or Redis does not
// answer (never the driver's error, which names users, hosts and ports),
// a full backlog, and that its answer is reused for Config.ReadCacheTTL.

// readyAnswer is an answer of /readyz.
type readyAnswer struct {
	code   int
	status string
	checks map[string]string
	raw    string
}

func readyz(t *testing.T, h http.Handler) readyAnswer {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	var body struct {
		Status string            `json:"status"`
		Checks map[string]string `json:"checks"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("/readyz answered %d %q: %v", rec.Code, rec.Body, err)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("/readyz Content-Type %q", ct)
	}
	api, err := contract()
	if err != nil {
		t.Fatal(err)
	}
	if err := api.CheckAnswer(http.MethodGet, "/readyz", rec.Code, rec.Header(), rec.Body.Bytes()); err != nil {
		t.Errorf("OpenAPI contract: %v", err)
	}
	return readyAnswer{code: rec.Code, status: body.Status, checks: body.Checks, raw: rec.Body.String()}
}

// newReadyServer is an intake on store and rdb with shards stream shards,
// not serving: /readyz needs only its handler. Its answer is reused for
// 1ns only, so that each call checks again, unless an option says
// otherwise. Its log goes to the buffer returned.
func newReadyServer(t *testing.T, store *ledger.Store, rdb redis.UniversalClient, shards int, opts ...option) (*intake.Server, stream.Keys, *testenv.LogBuffer) {
	t.Helper()
	keys, err := stream.NewKeys(testenv.RandomName("t"), shards)
	if err != nil {
		t.Fatal(err)
	}
	c := config{Config: intake.Config{RedisTimeout: 500 * time.Millisecond, PostgresTimeout: time.Second, ReadCacheTTL: time.Nanosecond}}
	for _, o := range opts {
		o(&c)
	}
	cfg := c.Config // only intake's Config: the server is on store and rdb
	logs := &testenv.LogBuffer{}
	srv, err := intake.New(cfg, store, rdb, keys, slog.New(slog.NewTextHandler(logs, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	// Not served: load what Serve would at start, where PostgreSQL answers.
	_ = srv.Reload(context.Background())
	return srv, keys, logs
}

// TestReadyzHidesDriverErrors: with PostgreSQL and Redis on closed ports,
// /readyz answers 503 (Redis) naming each as unreachable, and its body holds none
// of the database URL's user, password, database, host or port, nor Redis'
// address; the log has the drivers' errors with the check's name.
func TestReadyzHidesDriverErrors(t *testing.T) {
	t.Parallel()
	pgAddr, err := testenv.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	redisAddr, err := testenv.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(context.Background(), "postgres://readyzuser:readyzpass@"+pgAddr+"/readyzdb?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store, err := ledger.New(pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	srv, _, logs := newReadyServer(t, store, rdb, 1, func(c *config) { c.BreakerFailures = 1 })

	r := readyz(t, srv.Handler())
	if r.code != http.StatusServiceUnavailable || r.status != "not ready" ||
		r.checks["postgres"] != "unreachable" || r.checks["redis"] != "unreachable" || r.checks["backlog"] != "unknown" {
		t.Fatalf("/readyz with both down: %d %s", r.code, r.raw)
	}
	pgHost, pgPort, _ := net.SplitHostPort(pgAddr)
	_, redisPort, _ := net.SplitHostPort(redisAddr)
	for _, secret := range []string{"readyzuser", "readyzpass", "readyzdb", pgHost, pgPort, redisPort, "dial", "refused"} {
		if strings.Contains(r.raw, secret) {
			t.Errorf("/readyz body names %q: %s", secret, r.raw)
		}
	}
	log := logs.String()
	for _, want := range []string{"check=postgres", "check=redis", "readyzuser"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log does not hold %q, which the operator needs: %s", want, log)
		}
	}

	// The failed ping opened the breaker (BreakerFailures 1): Redis is not
	// tried again until the breaker lets a trial through.
	if r := readyz(t, srv.Handler()); r.code != http.StatusServiceUnavailable || r.checks["redis"] != "breaker_open" {
		t.Fatalf("/readyz with the breaker open: %d %s", r.code, r.raw)
	}
}

// TestReadyzRedisKilled: a Redis that was up and is killed reads
// unreachable while PostgreSQL reads ok, and the body does not hold Redis'
// address; started again, /readyz is ready again.
func TestReadyzRedisKilled(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	server := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: server.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	srv, _, _ := newReadyServer(t, store, rdb, 2, func(c *config) { c.BreakerOpenFor = 100 * time.Millisecond })
	if r := readyz(t, srv.Handler()); r.code != http.StatusOK || r.status != "ready" {
		t.Fatalf("/readyz with both up: %d %s", r.code, r.raw)
	}

	server.Kill()
	r := readyz(t, srv.Handler())
	if r.code != http.StatusServiceUnavailable || r.checks["postgres"] != "ok" || r.checks["redis"] != "unreachable" {
		t.Fatalf("/readyz with Redis killed: %d %s", r.code, r.raw)
	}
	_, port, _ := net.SplitHostPort(server.Addr)
	if strings.Contains(r.raw, port) || strings.Contains(r.raw, "127.0.0.1") {
		t.Fatalf("/readyz body names Redis' address %s: %s", server.Addr, r.raw)
	}

	server.Start()
	testenv.Eventually(t, 5*time.Second, "/readyz ready once Redis is back", func() bool { return readyz(t, srv.Handler()).code == http.StatusOK })
}

// TestReadyzBacklogFull: /readyz reports the longest shard's entries
// (backlog_entries, and each shard's in tally_intake_stream_entries);
// from 80% of Config.MaxBacklog its backlog check reads backlog_high, and
// once any shard's stream holds Config.MaxBacklog entries (the length at
// which votes on it are refused) backlog_full. Both answer 200
// "degraded", since every intake shares the streams and taking this one
// out of rotation would not help.
func TestReadyzBacklogFull(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rdb, _ := testenv.Redis(t)
	const maxBacklog = 5 // high from 4
	srv, keys, _ := newReadyServer(t, store, rdb, 4, func(c *config) { c.MaxBacklog = maxBacklog })
	t.Cleanup(func() { rdb.Del(context.Background(), keys.Streams()...) })

	ctx := context.Background()
	add := func(shard, n int) {
		t.Helper()
		for range n {
			if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: keys.Stream(shard), Values: []string{"v", "1"}}).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(what, status, backlog string, entries int64) {
		t.Helper()
		r := readyz(t, srv.Handler())
		var body struct {
			Entries *int64 `json:"backlog_entries"`
		}
		if err := json.Unmarshal([]byte(r.raw), &body); err != nil {
			t.Fatal(err)
		}
		if r.code != http.StatusOK || r.status != status || r.checks["backlog"] != backlog ||
			r.checks["redis"] != "ok" || r.checks["postgres"] != "ok" || body.Entries == nil || *body.Entries != entries {
			t.Fatalf("/readyz %s: %d %s; want %s, backlog %s, backlog_entries %d", what, r.code, r.raw, status, backlog, entries)
		}
		if got := testutil.ToFloat64(srv.StreamEntries().WithLabelValues("3")); got != float64(entries) {
			t.Fatalf("/readyz %s: tally_intake_stream_entries{shard=\"3\"} %v, want %d", what, got, entries)
		}
	}
	add(3, 3)
	add(1, 1)
	check("with 3 entries of 5", "ready", "ok", 3)
	if got := testutil.ToFloat64(srv.StreamEntries().WithLabelValues("1")); got != 1 {
		t.Fatalf("tally_intake_stream_entries{shard=\"1\"} %v, want 1", got)
	}
	add(3, 1)
	check("with 4 entries of 5", "degraded", "backlog_high", 4)
	add(3, 1)
	check("with a full shard", "degraded", "backlog_full", maxBacklog)
}

// closedPostgres is a store on a PostgreSQL that does not listen.
func closedPostgres(t *testing.T) *ledger.Store {
	t.Helper()
	addr, err := testenv.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(context.Background(), "postgres://tally@"+addr+"/tally?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store, err := ledger.New(pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// TestReadyzPostgresDown: an intake that started while PostgreSQL was
// down never loaded its catalog and revocations, so it can accept no
// vote: 503 "not ready", catalog loading, postgres unreachable. (One that
// loaded them and then lost PostgreSQL reads 200 "degraded":
// TestPostgresDownDegraded.)
func TestReadyzPostgresDown(t *testing.T) {
	t.Parallel()
	rdb, _ := testenv.Redis(t)
	srv, _, logs := newReadyServer(t, closedPostgres(t), rdb, 1)
	r := readyz(t, srv.Handler())
	if r.code != http.StatusServiceUnavailable || r.status != "not ready" || r.checks["catalog"] != "loading" ||
		r.checks["postgres"] != "unreachable" || r.checks["redis"] != "ok" || r.checks["backlog"] != "ok" {
		t.Fatalf("/readyz with PostgreSQL down since the start: %d %s, want 503 not ready, catalog loading", r.code, r.raw)
	}
	if !strings.Contains(logs.String(), "check=postgres") {
		t.Fatalf("the log does not name the failed check: %s", logs)
	}
}

// TestReadyzCached: within Config.ReadCacheTTL /readyz answers what it
// found last, without checking again, so a flood of health checks costs
// PostgreSQL and Redis one check per period.
func TestReadyzCached(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	server := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: server.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	srv, _, _ := newReadyServer(t, store, rdb, 1, func(c *config) { c.ReadCacheTTL = time.Hour })
	if r := readyz(t, srv.Handler()); r.code != http.StatusOK || r.status != "ready" {
		t.Fatalf("/readyz with both up: %d %s", r.code, r.raw)
	}
	server.Kill()
	if r := readyz(t, srv.Handler()); r.code != http.StatusOK || r.status != "ready" {
		t.Fatalf("/readyz within its cache TTL: %d %s, want the cached ready", r.code, r.raw)
	}
}
