package projector_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"
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
			bd := setup(b, 1)
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

// processCPU is the CPU time this process has used, user and system.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
