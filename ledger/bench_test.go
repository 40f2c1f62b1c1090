package ledger_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"tally/internal/testenv"
	"tally/ledger"
)

// BenchmarkAppend appends batches of new events (each a first response of a
// fresh principal) at several batch sizes and reports events/s. Batching
// is the point of the design: the cost per transaction (a commit, a few
// round trips) is shared by the whole batch.
func BenchmarkAppend(b *testing.B) {
	for _, size := range []int{1, 100, 1000, 5000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			db := testenv.Postgres(b)
			store, err := ledger.New(db.Pool, ledger.Config{})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if err := store.CreatePoll(ctx, ledger.Poll{ID: "bench", Title: "bench", OpensAt: time.Unix(0, 0),
				Choices: []string{"a", "b", "c", "d"}}); err != nil {
				b.Fatal(err)
			}
			batch := make([]ledger.Event, size)
			n := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				now := time.Now()
				for j := range batch {
					n++
					batch[j] = ledger.Event{PrincipalID: fmt.Sprintf("p%09d", n), ClientEventID: "k1", PollID: "bench",
						CandidateID: []string{"a", "b", "c", "d"}[n%4], ReceivedAt: now}
				}
				b.StartTimer()
				outs, err := store.Append(ctx, batch)
				if err != nil {
					b.Fatal(err)
				}
				if outs[0].Status != ledger.StatusRecorded {
					b.Fatalf("outcome %s, want recorded", outs[0])
				}
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
