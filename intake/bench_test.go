package intake_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tally/internal/testenv"
)

// BenchmarkPostVote measures POST /v1/votes end to end on loopback: HTTP,
// authentication (cached), catalog check and the enqueue script on the
// test Redis. Every vote has a new event id, of a principal younger than
// the idempotency window (no ledger lookup); the rate limit is set out of
// the way. It reports votes/s and the p50 and p99 latency.
func BenchmarkPostVote(b *testing.B) {
	bd := setup(b, func(c *config) { c.Rate = 1e6; c.Burst = 1_000_000 })
	establishedEpoch(b, bd.rdb, bd.keys) // the principal is young: no ledger lookups
	benchPost(b, bd.url+"/v1/votes", bd.token)
}

// BenchmarkPostVoteLedgerCheck is BenchmarkPostVote for a principal
// older than the idempotency window: each new vote is looked up in the
// ledger (concurrent votes share a query) and its script runs twice.
func BenchmarkPostVoteLedgerCheck(b *testing.B) {
	db := testenv.Postgres(b)
	rdb, prefix := testenv.Redis(b)
	bd := setup(b, withDB(db), withRedis(rdb, prefix), func(c *config) { c.Rate = 1e6; c.Burst = 1_000_000 })
	if _, err := db.Pool.Exec(b.Context(), `UPDATE principals SET created_at = now() - interval '48 hours' WHERE id = $1`, bd.who.ID); err != nil {
		b.Fatal(err)
	}
	benchPost(b, bd.url+"/v1/votes", bd.token)
}

// BenchmarkBareHandler is the baseline of BenchmarkPostVote: the same
// client and body against a net/http handler that only reads the body and
// answers 202.
func BenchmarkBareHandler(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		w.Write([]byte(`{"event_id":"e","status":"pending","status_url":"/v1/votes/e"}` + "\n"))
	})}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	benchPost(b, "http://"+ln.Addr().String()+"/v1/votes", "bare-token")
}

// benchPost posts b.N votes with unique event ids from GOMAXPROCS*4
// goroutines over keep-alive connections.
func benchPost(b *testing.B, url, token string) {
	tr := &http.Transport{MaxIdleConnsPerHost: 256}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var seq atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	prefix := fmt.Sprintf("b%d-", time.Now().UnixNano())
	b.SetParallelism(4)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		for pb.Next() {
			body := voteBody(fmt.Sprintf("%s%d", prefix, seq.Add(1)), "p1", "a")
			req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json")
			t0 := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			mine = append(mine, time.Since(t0))
			if resp.StatusCode != http.StatusAccepted {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "req/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
