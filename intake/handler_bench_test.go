package intake_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"tally/intake"
	"tally/internal/testenv"
	"tally/ledger"
	"tally/stream"
)

// BenchmarkHandler measures the vote handler alone, without a network
// client: its time per vote includes one Redis round trip, its allocations
// are intake's own. The voter's token is a signed credential. The principal is younger than the idempotency window
// and than the shard's epoch, as most voters of an established Redis:
// its new votes cost no ledger lookup.
func BenchmarkHandler(b *testing.B) {
	benchHandler(b, 0)
}

// BenchmarkHandlerLedgerCheck is BenchmarkHandler with
// Config.LedgerCheck, for a principal older than the idempotency window:
// every new vote is looked up in the ledger
// and its script runs twice. One vote at a time, so no lookup shares its
// query: the worst case.
func BenchmarkHandlerLedgerCheck(b *testing.B) {
	benchHandler(b, 48*time.Hour)
}

// benchHandler sends b.N new votes of a principal created age ago (0: now)
// through the handler.
func benchHandler(b *testing.B, age time.Duration) {
	db := testenv.Postgres(b)
	rdb, prefix := testenv.Redis(b)
	store, _ := ledger.New(db.Pool, ledger.Config{})
	keys, _ := stream.NewKeys(prefix, 1)
	key, verifier := credentialKey(b)
	srv, err := intake.New(intake.Config{Rate: 1e6, Burst: 1_000_000, LedgerCheck: age > 0, Credentials: verifier},
		store, rdb, keys, testLogger(), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	establishedEpoch(b, rdb, keys)
	ps, err := store.AddPrincipals(ctx, []string{"voter"}, "")
	if err != nil {
		b.Fatal(err)
	}
	createdAt := ps[0].CreatedAt.Add(-age)
	if _, err := db.Pool.Exec(ctx, `UPDATE principals SET created_at = $2 WHERE id = $1`, ps[0].ID, createdAt); err != nil {
		b.Fatal(err)
	}
	token, err := key.Issue(ps[0].ID, createdAt, time.Time{})
	if err != nil {
		b.Fatal(err)
	}
	if err := store.CreatePoll(ctx, ledger.Poll{ID: "p1", Title: "t", Choices: []string{"a"}}); err != nil {
		b.Fatal(err)
	}
	if err := srv.Reload(ctx); err != nil {
		b.Fatal(err)
	}
	h := srv.Handler()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		req := httptest.NewRequest(http.MethodPost, "/v1/votes", bytes.NewReader(voteBody(fmt.Sprintf("h%d", i), "p1", "a")))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusAccepted {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

// establishedEpoch sets the shard's epoch an hour back, as on a Redis that
// has held records for a while, so that a principal created after it is
// known to hold all its records.
func establishedEpoch(tb testing.TB, rdb redis.UniversalClient, keys stream.Keys) {
	tb.Helper()
	if err := rdb.Set(context.Background(), keys.Epoch(0), time.Now().Add(-time.Hour).UnixMicro(), 0).Err(); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkHandlerRESP is BenchmarkHandlerToken's one principal, 64 votes
// at a time as in the burst (so that the batcher pipelines them), with the
// Redis client speaking each RESP version: on RESP3 go-redis looks for
// push notifications around every reply, which tally never receives.
// Besides the time per vote it reports this process's CPU time per vote.
func BenchmarkHandlerRESP(b *testing.B) {
	for _, protocol := range []int{2, 3} {
		b.Run(fmt.Sprintf("resp%d", protocol), func(b *testing.B) {
			db := testenv.Postgres(b)
			_, prefix := testenv.Redis(b) // deletes the prefix's keys at the end
			opt, err := redis.ParseURL(testenv.RedisURL())
			if err != nil {
				b.Fatal(err)
			}
			opt.Protocol = protocol
			rdb := redis.NewClient(opt)
			b.Cleanup(func() { rdb.Close() })
			store, _ := ledger.New(db.Pool, ledger.Config{})
			keys, _ := stream.NewKeys(prefix, 1)
			key, verifier := credentialKey(b)
			srv, err := intake.New(intake.Config{Rate: 1e6, Burst: 1_000_000, Credentials: verifier}, store, rdb, keys, testLogger(), prometheus.NewRegistry())
			if err != nil {
				b.Fatal(err)
			}
			establishedEpoch(b, rdb, keys)
			if err := store.CreatePoll(b.Context(), ledger.Poll{ID: "p1", Title: "t", Choices: []string{"a"}}); err != nil {
				b.Fatal(err)
			}
			if err := srv.Reload(b.Context()); err != nil {
				b.Fatal(err)
			}
			token := signPrincipals(b, store, key, 1)[0]
			h := srv.Handler()
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(32) // 64 at a time on two cores
			cpu0 := cpuTime(b)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					body := voteBody(fmt.Sprintf("h%d", next.Add(1)), "p1", "a")
					req := httptest.NewRequest(http.MethodPost, "/v1/votes", bytes.NewReader(body))
					req.Header.Set("Authorization", "Bearer "+token)
					req.Header.Set("Content-Type", "application/json")
					w := httptest.NewRecorder()
					h.ServeHTTP(w, req)
					if w.Code != http.StatusAccepted {
						b.Errorf("status %d: %s", w.Code, w.Body)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}
