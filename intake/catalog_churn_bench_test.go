package intake_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"tally/internal/testenv"
	"tally/ledger"
)

// BenchmarkVoteWhileCatalogChanges measures what a catalog change costs
// the votes an intake takes meanwhile: votes at a steady rate while polls
// are created at 10 a second, in rounds that alternate three ways: none
// created; created in another database of the same PostgreSQL (the server
// does the same work, and this process the same writes, but the intake
// hears of none); created in the intake's own database (it applies each).
// The difference between the last two is the intake's own share: its
// listener, its reads of each change and its catalog's update. Each way
// reports its votes' p50 and p99 and this process's CPU per poll created
// above none's. The catalog holds 10,000 polls (churnSize).
func BenchmarkVoteWhileCatalogChanges(b *testing.B) {
	const (
		voteRate  = 400 // votes a second
		senders   = 4
		createdAt = 100 * time.Millisecond // between two polls created
	)
	roundFor, bu, otherStore := churnSetup(b)
	tokens := make([]string, senders)
	for i := range tokens {
		_, tokens[i] = bu.principal(b, fmt.Sprintf("churn%d", i))
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: senders}, Timeout: 10 * time.Second}
	ways := []struct {
		name  string
		store *ledger.Store // where polls are created; nil for none
	}{{"none", nil}, {"elsewhere", otherStore}, {"here", bu.store}}
	lats := make([][]time.Duration, len(ways))
	cpu := make([]time.Duration, len(ways))
	created := make([]int, len(ways))
	serial := 0
	b.ResetTimer()
	for range b.N {
		for i, w := range ways {
			cpu0 := processCPU()
			stop := make(chan struct{})
			var cw sync.WaitGroup
			if w.store != nil {
				cw.Go(func() {
					tick := time.NewTicker(createdAt)
					defer tick.Stop()
					for {
						select {
						case <-stop:
							return
						case <-tick.C:
						}
						serial++
						p := ledger.Poll{ID: fmt.Sprintf("n%d", serial), Title: "t", Choices: []string{"a", "b"}}
						if err := w.store.CreatePoll(context.Background(), p); err != nil {
							b.Error(err)
							return
						}
						created[i]++
					}
				})
			}
			round := voteRound(b, client, bu.url, tokens, fmt.Sprintf("%s%d", w.name, len(lats[i])), voteRate, roundFor)
			close(stop)
			cw.Wait()
			lats[i] = append(lats[i], round...)
			cpu[i] += processCPU() - cpu0
		}
	}
	b.StopTimer()
	for i, w := range ways {
		slices.Sort(lats[i])
		b.ReportMetric(float64(quantileOf(lats[i], 0.5).Microseconds()), "p50-"+w.name+"-us")
		b.ReportMetric(float64(quantileOf(lats[i], 0.99).Microseconds()), "p99-"+w.name+"-us")
		if created[i] > 0 {
			b.ReportMetric(float64((cpu[i]-cpu[0]).Microseconds())/float64(created[i]), "cpu-"+w.name+"-us/poll")
		}
	}
}

// BenchmarkCatalogChangeCPU reports the CPU an intake spends applying one
// catalog change while it takes no vote: polls created at 10 a second,
// rounds alternating between the intake's own database and another one
// of the same PostgreSQL (this process's own writes, which the intake does
// not hear of); the difference of this process's CPU per poll is the
// intake's, from its listener's wake-up to its catalog's update.
func BenchmarkCatalogChangeCPU(b *testing.B) {
	const createdAt = 100 * time.Millisecond
	roundFor, bu, otherStore := churnSetup(b)
	ways := []struct {
		name  string
		store *ledger.Store
	}{{"elsewhere", otherStore}, {"here", bu.store}}
	cpu := make([]time.Duration, len(ways))
	created := make([]int, len(ways))
	serial := 0
	b.ResetTimer()
	for range b.N {
		for i, w := range ways {
			cpu0 := processCPU()
			tick := time.NewTicker(createdAt)
			for end := time.Now().Add(roundFor); time.Now().Before(end); {
				<-tick.C
				serial++
				p := ledger.Poll{ID: fmt.Sprintf("n%d", serial), Title: "t", Choices: []string{"a", "b"}}
				if err := w.store.CreatePoll(context.Background(), p); err != nil {
					b.Fatal(err)
				}
				created[i]++
			}
			tick.Stop()
			time.Sleep(createdAt) // the last change applied
			cpu[i] += processCPU() - cpu0
		}
	}
	b.StopTimer()
	for i, w := range ways {
		b.ReportMetric(float64(cpu[i].Microseconds())/float64(created[i]), "cpu-"+w.name+"-us/poll")
	}
	b.ReportMetric(float64(cpu[1].Microseconds())/float64(created[1])-float64(cpu[0].Microseconds())/float64(created[0]), "cpu-applied-us/poll")
}

// churnSetup starts an intake whose catalog holds churnSize's polls, and
// another database of the same PostgreSQL holding the same polls, and
// returns a round's time, the intake and the other database's store.
func churnSetup(b *testing.B) (time.Duration, *bundle, *ledger.Store) {
	polls, roundFor := churnSize()
	bu := setup(b)
	otherStore := newStore(b, testenv.Postgres(b).Pool)
	fillPolls(b, bu.store, polls)
	fillPolls(b, otherStore, polls)
	bu.waitCatalog(b, fmt.Sprintf("c%d", polls-1))
	return roundFor, bu, otherStore
}

// churnSize is the catalog's polls and a round's time of the benchmarks
// above: 10,000 polls and 3 s, or with -short (make test runs every
// benchmark once) 100 polls and 300 ms.
func churnSize() (polls int, round time.Duration) {
	if testing.Short() {
		return 100, 300 * time.Millisecond
	}
	return 10_000, 3 * time.Second
}

// fillPolls creates n polls of 2 choices, c0 to c(n-1), in bulk.
func fillPolls(tb testing.TB, store *ledger.Store, n int) {
	tb.Helper()
	for from := 0; from < n; from += ledger.MaxPollsPerCreate {
		var ps []ledger.Poll
		for i := from; i < min(n, from+ledger.MaxPollsPerCreate); i++ {
			ps = append(ps, ledger.Poll{ID: fmt.Sprintf("c%d", i), Title: "t", Choices: []string{"a", "b"}})
		}
		if _, err := store.EnsurePolls(context.Background(), ps); err != nil {
			tb.Fatal(err)
		}
	}
}

// voteRound votes on poll p1 at url at rate votes a second for d, from
// one sender per token, and returns each vote's latency; every vote must
// be answered 202.
func voteRound(tb testing.TB, client *http.Client, url string, tokens []string, prefix string, rate int, d time.Duration) []time.Duration {
	tb.Helper()
	total := int(float64(rate) * d.Seconds())
	interval := time.Duration(len(tokens)) * time.Second / time.Duration(rate)
	var mu sync.Mutex
	lats := make([]time.Duration, 0, total)
	var wg sync.WaitGroup
	start := time.Now()
	for s, token := range tokens {
		wg.Go(func() {
			for i := s; i < total; i += len(tokens) {
				if w := time.Until(start.Add(time.Duration(i/len(tokens)) * interval)); w > 0 {
					time.Sleep(w)
				}
				req, err := http.NewRequest(http.MethodPost, url+"/v1/votes", bytes.NewReader(voteBody(fmt.Sprintf("%s-%d", prefix, i), "p1", "a")))
				if err != nil {
					tb.Error(err)
					return
				}
				req.Header.Set("Authorization", "Bearer "+token)
				req.Header.Set("Content-Type", "application/json")
				t0 := time.Now()
				resp, err := client.Do(req)
				lat := time.Since(t0)
				if err != nil {
					tb.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					tb.Errorf("a vote answered %d, want 202", resp.StatusCode)
					return
				}
				mu.Lock()
				lats = append(lats, lat)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return lats
}

// quantileOf is the q-quantile of sorted.
func quantileOf(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// processCPU is the CPU time this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
