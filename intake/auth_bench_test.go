package intake_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tally/credential"
	"tally/intake"
	"tally/internal/testenv"
	"tally/ledger"
	"tally/stream"
)

// BenchmarkHandlerToken measures the vote handler alone, one vote at a
// time, with the signed token of one principal on every vote (one), and
// with the signed token of a principal it has not seen yet on every vote
// (new). Besides the time per vote it reports this process's CPU time
// per vote (cpu-µs/op), nearly all of it the handler's.
func BenchmarkHandlerToken(b *testing.B) {
	for _, tc := range []struct {
		name string
		new  bool
	}{{"one", false}, {"new", true}} {
		b.Run(tc.name, func(b *testing.B) {
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
			n := 1
			if tc.new {
				n = b.N
			}
			tokens := signPrincipals(b, store, key, n)
			h := srv.Handler()
			b.ReportAllocs()
			cpu0 := cpuTime(b)
			b.ResetTimer()
			for i := range b.N {
				req := httptest.NewRequest(http.MethodPost, "/v1/votes", bytes.NewReader(voteBody(fmt.Sprintf("h%d", i), "p1", "a")))
				req.Header.Set("Authorization", "Bearer "+tokens[i%n])
				req.Header.Set("Content-Type", "application/json")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusAccepted {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// BenchmarkPostVoteTokenPaced posts b.N votes over HTTP at a steady
// 500 a second, as the live measurement of BENCHMARKS.md does, with one
// signed token (one) or each with the signed token of a principal intake
// has not seen yet (new). At that rate votes rarely share a pipeline or
// a connection's read. It reports this process's CPU time per
// vote: intake's and the client's, the same for both.
func BenchmarkPostVoteTokenPaced(b *testing.B) {
	const rate = 500
	for _, tc := range []struct {
		name string
		new  bool
	}{{"one", false}, {"new", true}} {
		b.Run(tc.name, func(b *testing.B) {
			bd := setup(b, func(c *config) { c.Rate = 1e6; c.Burst = 1_000_000 })
			establishedEpoch(b, bd.rdb, bd.keys)
			tokens := []string{bd.token}
			if tc.new {
				tokens = signPrincipals(b, bd.store, bd.key, b.N)
			}
			client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
			defer client.CloseIdleConnections()
			var next atomic.Int64
			var wg sync.WaitGroup
			cpu0 := cpuTime(b)
			b.ResetTimer()
			start := time.Now()
			for range 32 {
				wg.Go(func() {
					for i := int(next.Add(1) - 1); i < b.N; i = int(next.Add(1) - 1) {
						time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / rate)))
						req, _ := http.NewRequest(http.MethodPost, bd.url+"/v1/votes", bytes.NewReader(voteBody(fmt.Sprintf("v%d", i), "p1", "a")))
						req.Header.Set("Authorization", "Bearer "+tokens[i%len(tokens)])
						req.Header.Set("Content-Type", "application/json")
						resp, err := client.Do(req)
						if err != nil {
							b.Error(err)
							return
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != http.StatusAccepted {
							b.Errorf("status %d", resp.StatusCode)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// credentialKey is a new credential key and the verifier of its tokens.
func credentialKey(tb testing.TB) (credential.Key, *credential.Verifier) {
	tb.Helper()
	key, err := credential.GenerateKey()
	if err != nil {
		tb.Fatal(err)
	}
	set, err := credential.NewKeySet(key)
	if err != nil {
		tb.Fatal(err)
	}
	return key, credential.NewVerifier(set)
}

// signPrincipals adds n principals, at most ledger.MaxPrincipalsPerAdd
// at a time, and returns a token signed by key for each.
func signPrincipals(tb testing.TB, store *ledger.Store, key credential.Key, n int) []string {
	tb.Helper()
	tokens := make([]string, 0, n)
	for len(tokens) < n {
		names := make([]string, min(n-len(tokens), ledger.MaxPrincipalsPerAdd))
		for i := range names {
			names[i] = fmt.Sprintf("voter %d", len(tokens)+i)
		}
		ps, err := store.AddPrincipals(tb.Context(), names, "")
		if err != nil {
			tb.Fatal(err)
		}
		for _, p := range ps {
			token, err := key.Issue(p.ID, p.CreatedAt, time.Time{})
			if err != nil {
				tb.Fatal(err)
			}
			tokens = append(tokens, token)
		}
	}
	return tokens
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
