package projector_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tally/internal/testenv"
	"tally/ledger"
	"tally/projector"
	"tally/stream"
)

// An entry dead-lettered while the ledger refused it is replayed once the
// cause is fixed, and is then recorded; an undecodable one is purged.
func TestDeadLetterReplayAndPurge(t *testing.T) {
	t.Parallel()
	b := setup(t, withShards(2))
	b.poll("lunch", "pizza", "sushi")
	var broken atomic.Bool
	broken.Store(true)
	app := applierFunc(func(ctx context.Context, events []ledger.Event) ([]ledger.Outcome, error) {
		if broken.Load() && contains(events, "k-broken") {
			return nil, fmt.Errorf("append batch: %w", errPermanent)
		}
		return b.store.Append(ctx, events)
	})
	cfg := fast("p1")
	cfg.Workers = 1 // alice's and bob's entries in one batch: bob's commits, so alice's is at fault
	b.start(app, cfg)
	b.enqueue(ballot("alice", "k-broken", "lunch", "pizza"), ballot("bob", "k1", "lunch", "sushi"))
	b.enqueueRaw(1, "garbage", "1")
	b.waitDrained(10 * time.Second)
	dl := projector.NewDeadLetters(b.rdb, b.keys)
	ds := b.deadLetters()
	if len(ds) != 2 {
		t.Fatalf("dead letters %+v, want 2", ds)
	}
	var failed, junk projector.DeadLetter
	for _, d := range ds {
		switch d.Reason {
		case projector.ReasonFailed:
			failed = d
		case projector.ReasonUndecodable:
			junk = d
		}
	}
	if key(failed) != "k-broken" || !strings.Contains(failed.Error, "simulated permanent failure") {
		t.Fatalf("failed dead letter %+v", failed)
	}
	got, err := dl.Get(b.ctx, failed.ID) // a bare id names it when one shard holds it
	if err != nil || got.Ref() != failed.Ref() {
		t.Fatalf("get %s: %+v, %v", failed.ID, got, err)
	}
	if _, err := dl.Get(b.ctx, "1-0"); !errors.Is(err, projector.ErrDeadLetterNotFound) {
		t.Errorf("get of an unknown id: %v, want ErrDeadLetterNotFound", err)
	}
	if _, err := dl.Get(b.ctx, "9/1-0"); err == nil {
		t.Errorf("get with a shard out of range: no error")
	}

	broken.Store(false)
	ids, err := dl.Replay(b.ctx, failed.Ref())
	if err != nil || len(ids) != 1 {
		t.Fatalf("replay: %v, %v", ids, err)
	}
	b.waitDrained(10 * time.Second)
	if got := b.tallies("lunch"); got["pizza"] != 1 || got["sushi"] != 1 {
		t.Errorf("tallies after replay %v, want pizza 1 sushi 1", got)
	}
	if n, err := dl.Purge(b.ctx, junk.Ref()); err != nil || n != 1 {
		t.Fatalf("purge: %d, %v", n, err)
	}
	if ds := b.deadLetters(); len(ds) != 0 {
		t.Errorf("dead letters after replay and purge: %+v", ds)
	}
}

// Entries deleted from the stream while pending (trimmed by someone) are
// counted as lost and leave a tombstone in the dead-letter stream, whether
// another consumer's (XAUTOCLAIM reports them) or this one's own (its
// pending list still names them).
func TestDeletedWhilePendingCountedAsLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll("lunch", "pizza", "sushi")
	b.enqueue(votes("u", 2, "lunch", "pizza")...)
	gone1 := b.enqueueRaw(0, stream.FieldEntry, stream.Encode(ballot("v1", "k1", "lunch", "sushi")))
	gone2 := b.enqueueRaw(0, stream.FieldEntry, stream.Encode(ballot("v2", "k1", "lunch", "sushi")))
	msgs := b.readAs("dead-consumer", 3) // the two votes and gone1
	if len(msgs) != 3 {
		t.Fatalf("read %d entries, want 3", len(msgs))
	}
	b.readAs("p1", 1) // gone2, on the consumer about to start
	if err := b.rdb.XDel(b.ctx, b.keys.Stream(0), gone1, gone2).Err(); err != nil {
		t.Fatal(err)
	}
	r := b.start(b.store, claiming("p1"))
	b.waitDrained(10 * time.Second)
	if got := r.metric("tally_projector_lost_total"); got != 2 {
		t.Errorf("lost metric %v, want 2", got)
	}
	tomb := map[string]bool{}
	for _, d := range b.deadLetters() {
		if d.Reason == projector.ReasonLost && len(d.Fields) == 0 {
			tomb[d.StreamID] = true
		}
	}
	if !tomb[gone1] || !tomb[gone2] {
		t.Errorf("tombstones %v, want %s and %s", tomb, gone1, gone2)
	}
	if _, err := projector.NewDeadLetters(b.rdb, b.keys).Replay(b.ctx, "0/"+b.deadLetters()[0].ID); err == nil {
		t.Errorf("replay of a tombstone: no error")
	}
	if got := sum(b.tallies("lunch")); got != 2 {
		t.Errorf("total votes %d, want 2", got)
	}
}

// A stop while a batch is in flight lets it commit within the grace, and
// acknowledges it; the projector then leaves the group.
func TestStopFinishesBatchInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll("lunch", "pizza", "sushi")
	entered := make(chan struct{})
	var once atomic.Bool
	slow := applierFunc(func(ctx context.Context, events []ledger.Event) ([]ledger.Outcome, error) {
		if once.CompareAndSwap(false, true) {
			close(entered)
		}
		time.Sleep(300 * time.Millisecond)
		return b.store.Append(ctx, events)
	})
	b.enqueue(votes("u", 25, "lunch", "pizza", "sushi")...)
	r := b.start(slow, fast("p1"))
	testenv.Receive(t, entered, 10*time.Second, "the first batch to reach the applier")
	r.stop()
	if got := b.ledgerRows(); got != 25 {
		t.Errorf("%d ledger rows, want the whole batch in flight: 25", got)
	}
	if !b.drained() {
		t.Errorf("backlog %d, pending %d after the stop: the committed batch was not acknowledged", b.backlog(), b.pending(""))
	}
	st, err := projector.Inspect(b.ctx, b.rdb, b.keys)
	if err != nil {
		t.Fatal(err)
	}
	if st.Total.Consumers != 0 {
		t.Errorf("%d consumers in the group after the stop, want 0: it had nothing pending", st.Total.Consumers)
	}
}

// Inspect reports backlog, pending entries, their age, the age of the
// oldest entry not delivered yet, consumers and dead letters per shard,
// and zeros for streams not created yet.
func TestInspect(t *testing.T) {
	t.Parallel()
	b := setup(t, withShards(2))
	st, err := projector.Inspect(b.ctx, b.rdb, b.keys)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Shards) != 2 || st.Total.Backlog != 0 || st.Total.GroupExists {
		t.Fatalf("status of nothing: %+v", st)
	}
	for i := range 6 {
		if i == 4 {
			time.Sleep(30 * time.Millisecond) // the entries left undelivered are younger than the pending ones
		}
		b.enqueueRaw(0, "n", fmt.Sprint(i))
	}
	b.enqueueRaw(1, "n", "x")
	b.readAs("c1", 4)
	time.Sleep(20 * time.Millisecond)
	if err := b.rdb.XAdd(b.ctx, &redis.XAddArgs{Stream: b.keys.DeadLetter(1), Values: []string{projector.FieldDLReason, "undecodable"}}).Err(); err != nil {
		t.Fatal(err)
	}
	st, err = projector.Inspect(b.ctx, b.rdb, b.keys)
	if err != nil {
		t.Fatal(err)
	}
	s0, s1 := st.Shards[0], st.Shards[1]
	if s0.Backlog != 6 || s0.Pending != 4 || s0.Consumers != 1 || s0.OldestPending < 20*time.Millisecond || !s0.GroupExists ||
		s0.OldestUndelivered < 20*time.Millisecond || s0.OldestUndelivered > s0.OldestPending-25*time.Millisecond {
		t.Errorf("shard 0: %+v", s0)
	}
	if s1.Backlog != 1 || s1.Pending != 0 || s1.DeadLetters != 1 || s1.OldestPending != 0 || s1.OldestUndelivered < 20*time.Millisecond {
		t.Errorf("shard 1: %+v", s1)
	}
	if st.Total.OldestUndelivered != max(s0.OldestUndelivered, s1.OldestUndelivered) {
		t.Errorf("total: oldest undelivered %v, want the older shard's", st.Total.OldestUndelivered)
	}
	if st.Total.Backlog != 7 || st.Total.Pending != 4 || st.Total.DeadLetters != 1 {
		t.Errorf("total: %+v", st.Total)
	}
	b.readAs("c1", 2) // the rest of shard 0: every entry delivered, none left waiting
	if st, err = projector.Inspect(b.ctx, b.rdb, b.keys); err != nil {
		t.Fatal(err)
	}
	if s0 := st.Shards[0]; s0.Pending != 6 || s0.OldestUndelivered != 0 {
		t.Errorf("shard 0 with every entry delivered: %+v", s0)
	}
}
