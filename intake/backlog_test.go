package intake

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"tally/internal/testenv"
)

// This file tests the gauge of the votes intake holds that Redis has not
// answered (backlog.go): votes waiting for a pipeline count, votes in a
// pipeline Redis has not answered count, and an answered vote does not.

// heldGauge is a held_votes gauge that reads f's batcher.
func heldGauge(t *testing.T, f *batcherFixture) prometheus.GaugeFunc {
	t.Helper()
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	m.heldBy.Store(f.b)
	return m.heldVotes
}

// TestHeldVotesPending: votes waiting while the pipeline is taken are
// held; once sent and answered, none is.
func TestHeldVotesPending(t *testing.T) {
	t.Parallel()
	f := newBatcherFixture(t, nil, Config{EnqueuePipelines: 1})
	held := heldGauge(t, f)
	if got := testutil.ToFloat64(held); got != 0 {
		t.Fatalf("held_votes %v before any vote, want 0", got)
	}
	f.occupy(t)
	_, errs, wg := f.goSend([]ballot{{"v", "e1", "a"}, {"w", "e2", "a"}, {"x", "e3", "a"}})
	f.waitPending(t, 3)
	if got := testutil.ToFloat64(held); got != 3 {
		t.Fatalf("held_votes %v with 3 votes waiting for the pipeline, want 3", got)
	}
	f.release()
	testenv.WaitGroup(t, wg, 15*time.Second, "the answers to the votes held")
	for i, err := range errs {
		if err != nil {
			t.Fatalf("vote %d: %v", i, err)
		}
	}
	if got := testutil.ToFloat64(held); got != 0 {
		t.Fatalf("held_votes %v once every vote was answered, want 0", got)
	}
}

// TestHeldVotesInFlight: votes in a pipeline Redis takes and never
// answers are held until their deadline answers them; then none is.
func TestHeldVotesInFlight(t *testing.T) {
	t.Parallel()
	f := newBatcherFixture(t, hungRedis(t), Config{EnqueuePipelines: 1, RedisTimeout: time.Minute})
	held := heldGauge(t, f)
	deadline := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for _, v := range []ballot{{"v", "e1", "a"}, {"w", "e2", "a"}} {
		wg.Go(func() { _, _ = f.do(v, deadline) })
	}
	testenv.Eventually(t, time.Until(deadline), "2 votes held in 1 pipeline before the votes' deadline", func() error {
		f.b.mu.Lock()
		flying := len(f.b.flying)
		f.b.mu.Unlock()
		if got := testutil.ToFloat64(held); flying != 1 || got != 2 {
			return fmt.Errorf("held_votes %v, %d pipelines under way", got, flying)
		}
		return nil
	})
	testenv.WaitGroup(t, &wg, 15*time.Second, "the votes answered at their deadline")
	if got := testutil.ToFloat64(held); got != 0 {
		t.Fatalf("held_votes %v once the deadline answered the votes, want 0", got)
	}
}
