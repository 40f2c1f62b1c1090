package projector_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"tally/ledger"
	"tally/stream"
	"tally/vote"
)

// BenchmarkDrain times a projector draining a preloaded backlog of b.N
// votes (each a first response) into the ledger, with one worker and with
// the shipped two, and reports events/s and this process's CPU time per
// event (cpu-µs/op: the projector's own work, nearly all of it; the
// ledger's is in PostgreSQL's processes). Enqueueing is not timed. Run it
// with -cpuprofile to see where the projector's share goes.
func BenchmarkDrain(b *testing.B) {
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			bd := setup(b)
			bd.poll("lunch", "pizza", "sushi", "tacos")
			bd.enqueue(votes("u", b.N, "lunch", "pizza", "sushi", "tacos")...)
			cfg := fast("bench")
			cfg.BatchSize = 1000
			cfg.Workers = workers
			cfg.MinIdle = time.Minute
			cpu0 := processCPU(b)
			b.ResetTimer()
			r := bd.start(bd.store, cfg)
			for !bd.drained() {
				time.Sleep(5 * time.Millisecond)
			}
			b.StopTimer()
			cpu := processCPU(b) - cpu0
			r.stop()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// BenchmarkDrainKinds is BenchmarkDrain's two workers draining ballots of
// each kind of the bench's P rows (cmd bench, kinds.go): 10 polls of 4
// choices, single choice (P), score of max_score 5 with every choice
// scored (P-score), ranked with every choice ranked (P-ranked). Its
// cpu-µs/op is the projector's CPU per event that those rows report,
// without PostgreSQL's and Redis's.
func BenchmarkDrainKinds(b *testing.B) {
	maxScore := 5
	for _, k := range []struct {
		name    string
		spec    vote.Spec
		ballots []string
	}{
		{"single", vote.Spec{}, []string{"a", "b", "c", "d"}},
		{"score", vote.Spec{Kind: "score", MaxScore: &maxScore},
			[]string{`{"a":0,"b":1,"c":2,"d":3}`, `{"a":1,"b":2,"c":3,"d":4}`, `{"a":2,"b":3,"c":4,"d":5}`, `{"a":5,"b":0,"c":1,"d":2}`}},
		{"ranked", vote.Spec{Kind: "ranked"}, []string{`["a","b","c","d"]`, `["c","a","d","b"]`, `["d","c","b","a"]`, `["b","d","a","c"]`}},
	} {
		b.Run("kind="+k.name, func(b *testing.B) {
			bd := setup(b)
			rules, err := vote.NewRules(k.spec, 4)
			if err != nil {
				b.Fatal(err)
			}
			const polls = 10
			for p := range polls {
				if err := bd.store.CreatePoll(bd.ctx, ledger.Poll{ID: fmt.Sprintf("poll%d", p), Title: "bench", OpensAt: time.Unix(0, 0),
					Choices: []string{"a", "b", "c", "d"}, Rules: rules}); err != nil {
					b.Fatal(err)
				}
			}
			es := make([]stream.Entry, b.N)
			for i := range es {
				es[i] = ledger.EventOf(fmt.Sprintf("u%d", i), "k1", fmt.Sprintf("poll%d", i%polls), k.ballots[(i/polls)%len(k.ballots)],
					time.Now().UTC().Truncate(time.Microsecond))
			}
			bd.enqueue(es...)
			cfg := fast("bench")
			cfg.BatchSize = 1000
			cfg.Workers = 2
			cfg.MinIdle = time.Minute
			cpu0 := processCPU(b)
			b.ResetTimer()
			r := bd.start(bd.store, cfg)
			for !bd.drained() {
				time.Sleep(5 * time.Millisecond)
			}
			b.StopTimer()
			cpu := processCPU(b) - cpu0
			r.stop()
			// The bundle's model of fates (checkInvariants) is of single
			// choices: rebuild checks the figures of every kind instead.
			bd.mu.Lock()
			bd.sent, bd.running = nil, nil
			bd.mu.Unlock()
			if rep, err := bd.store.Rebuild(bd.ctx, ""); err != nil || rep.Differing != 0 || rep.LogProblems != 0 || rep.LedgerEvents != int64(b.N) {
				b.Fatalf("after the drain rebuild finds %d events, %d figures differing, %d logs not verifying (%v); want %d, 0, 0", rep.LedgerEvents, rep.Differing, rep.LogProblems, err, b.N)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// processCPU is the CPU time this process has used, user and system.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
