package intake_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"tally/intake"
	"tally/internal/testenv"
	"tally/ledger"
	"tally/stream"
)

// BenchmarkHandlerBurst is the vote handler as the burst (bench's row B)
// drives it: 64 votes at a time, each with the signed token of a
// principal intake has not seen yet, so that every token is verified
// and every voter made. Run it with -benchtime Nx: it signs N tokens
// first. Besides the time per vote it reports this process's CPU time
// per vote (cpu-µs/op), nearly all of it the handler's and Redis'
// client's.
func BenchmarkHandlerBurst(b *testing.B) {
	db := testenv.Postgres(b)
	rdb, prefix := testenv.Redis(b)
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
	tokens := signPrincipals(b, store, key, b.N)
	auth := make([]string, len(tokens))
	for i, t := range tokens {
		auth[i] = "Bearer " + t
	}
	h := srv.Handler()
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(32) // 64 at a time on two cores
	cpu0 := cpuTime(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1) - 1
			req := httptest.NewRequest(http.MethodPost, "/v1/votes", bytes.NewReader(voteBody(fmt.Sprintf("h%d", i), "p1", "a")))
			req.Header.Set("Authorization", auth[i])
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
}
