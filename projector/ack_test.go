package projector_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tally/internal/testenv"
	"tally/ledger"
	"tally/stream"
)

// A batch commits and its acknowledgement fails: the projector's private
// Redis is killed right after the commit, before the batch is handed to
// the acknowledger, and started again (its data on disk) once the failure
// is counted. tally_projector_ack_errors_total counts the batch's entries;
// they stay pending, are claimed back after MinIdle and answer duplicate,
// the streams drain, and the ledger holds each vote once (finish).
func TestAcknowledgeFails(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	b := setup(t, withRedis(rdb, stream.DefaultPrefix))
	b.poll("lunch", "pizza", "sushi")
	const n = 20
	b.enqueue(votes("u", n, "lunch", "pizza", "sushi")...)

	var once sync.Once
	firstBatch := make(chan int, 1) // its size, once it committed and Redis is down
	app := applierFunc(func(ctx context.Context, events []ledger.Event) ([]ledger.Outcome, error) {
		outcomes, err := b.store.Append(ctx, events)
		if err == nil {
			once.Do(func() {
				srv.Kill()
				firstBatch <- len(events)
			})
		}
		return outcomes, err
	})
	cfg := claiming("p1")
	cfg.Workers = 1 // every entry in one lane: the first read makes the first batch
	r := b.start(app, cfg)

	var size int
	select {
	case size = <-firstBatch:
	case <-time.After(10 * time.Second):
		t.Fatal("no batch committed within 10s")
	}
	if size != n {
		t.Fatalf("the first batch held %d of the %d entries, want all of them: the count below would not be the batch's", size, n)
	}
	testenv.Eventually(b.t, 10*time.Second, "tally_projector_ack_errors_total to count the batch's entries", func() bool {
		return r.metric("tally_projector_ack_errors_total") >= n
	})
	if logs := r.logs.String(); !strings.Contains(logs, "acknowledge a committed batch failed") {
		t.Errorf("the failed acknowledgement was not logged:\n%s", logs)
	}
	srv.Start()
	// go-redis answers with the last dial error for a moment after a
	// server comes back.
	testenv.Eventually(b.t, 10*time.Second, "Redis to answer after its restart", func() bool { return rdb.Ping(b.ctx).Err() == nil })
	b.waitDrained(30 * time.Second)

	if got := r.metric("tally_projector_ack_errors_total"); got != n {
		t.Errorf("tally_projector_ack_errors_total %v, want %d: the entries of the one batch whose acknowledgement failed", got, n)
	}
	if got := r.metric("tally_projector_events_total", "outcome", "recorded"); got != n {
		t.Errorf("%v events counted recorded, want %d", got, n)
	}
	if got := r.metric("tally_projector_events_total", "outcome", "duplicate"); got != n {
		t.Errorf("%v events counted duplicate, want %d: the entries of the unacknowledged batch, applied again", got, n)
	}
	if got := r.metric("tally_projector_claimed_total"); got < n {
		t.Errorf("claimed %v entries, want at least the %d left pending", got, n)
	}
	if got := b.ledgerRows(); got != n {
		t.Errorf("ledger holds %d rows, want %d", got, n)
	}
}
