package projector_test

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkDrain times a projector draining a preloaded backlog of b.N
// votes (each a first response) into the ledger, with one worker and with
// the shipped two, and reports events/s. Enqueueing is not timed. Run it
// with -cpuprofile to see the projector's own share of the work: the
// ledger's is in PostgreSQL's processes.
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
			b.ResetTimer()
			r := bd.start(bd.store, cfg)
			for !bd.drained() {
				time.Sleep(5 * time.Millisecond)
			}
			b.StopTimer()
			r.stop()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
