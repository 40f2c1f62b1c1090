package projector_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"tally/internal/testenv"
	"tally/ledger"
	"tally/projector"
	"tally/stream"
)

// The happy path, with two shards: everything is recorded, acknowledged and
// deleted; the gauges see the empty streams.
func TestAppliesAndAcknowledges(t *testing.T) {
	t.Parallel()
	b := setup(t, withShards(2))
	b.poll("lunch", "pizza", "sushi")
	b.enqueue(votes("u", 250, "lunch", "pizza", "sushi")...)
	r := b.start(b.store, fast("p1"))
	b.waitDrained(20 * time.Second)
	if got := b.tallies("lunch"); got["pizza"] != 125 || got["sushi"] != 125 {
		t.Errorf("tallies %v, want pizza 125 sushi 125", got)
	}
	if got := r.metric("tally_projector_events_total", "outcome", "recorded"); got != 250 {
		t.Errorf("recorded metric %v, want 250", got)
	}
	testenv.Eventually(b.t, 5*time.Second, "the backlog gauge to fall to 0", func() bool {
		return r.metric("tally_projector_backlog") == 0 && r.metric("tally_projector_pending") == 0
	})
	r.stop()
	r.stop() // stopping twice is safe
}

// A failure before commit: nothing is acknowledged while Append fails (I4),
// and everything is applied once it works again.
func TestFailureBeforeCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll("lunch", "pizza", "sushi")
	fail := transient(t)
	var down atomic.Bool
	down.Store(true)
	var calls atomic.Int64
	app := applierFunc(func(ctx context.Context, events []ledger.Event) ([]ledger.Outcome, error) {
		calls.Add(1)
		if down.Load() {
			return nil, fail
		}
		return b.store.Append(ctx, events)
	})
	b.enqueue(votes("u", 40, "lunch", "pizza", "sushi")...)
	cfg := fast("p1")
	cfg.BreakerFailures = 1000 // this test is about the retries, not the breaker
	r := b.start(app, cfg)
	testenv.Eventually(b.t, 10*time.Second, "Append to be retried", func() bool { return calls.Load() >= 3 })
	if got := b.pending(""); got != 40 {
		t.Errorf("I4: %d entries pending while Append fails, want all 40", got)
	}
	if got := b.backlog(); got != 40 {
		t.Errorf("I4: backlog %d while Append fails, want 40", got)
	}
	if got := b.ledgerRows(); got != 0 {
		t.Fatalf("%d ledger rows after failed appends", got)
	}
	down.Store(false)
	b.waitDrained(20 * time.Second)
	if got := sum(b.tallies("lunch")); got != 40 {
		t.Errorf("total votes %d, want 40", got)
	}
	if r.metric("tally_projector_apply_errors_total", "kind", "transient") < 3 {
		t.Errorf("transient errors not counted")
	}
}

// A commit whose answer was lost: the batch committed, the projector saw an
// error. It must not acknowledge on a guess (I4); the retry finds the
// identical events and answers duplicate, without a second effect (I2).
func TestCommitAnswerLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll("lunch", "pizza", "sushi")
	fail := transient(t)
	var lost atomic.Int64
	inDoubt, release := make(chan struct{}), make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce) // the applier is not left waiting when the test stops early
	app := applierFunc(func(ctx context.Context, events []ledger.Event) ([]ledger.Outcome, error) {
		outcomes, err := b.store.Append(ctx, events)
		if err == nil && lost.Add(1) == 1 {
			close(inDoubt)
			<-release
			return nil, fail // committed, but the answer never arrives
		}
		return outcomes, err
	})
	b.enqueue(votes("u", 30, "lunch", "pizza", "sushi")...)
	cfg := fast("p1")
	cfg.Workers = 1 // the 30 entries in one batch
	r := b.start(app, cfg)
	select {
	case <-inDoubt:
	case <-time.After(10 * time.Second):
		t.Fatal("no batch was applied")
	}
	if got := b.ledgerRows(); got != 30 {
		t.Errorf("%d ledger rows after the commit, want 30", got)
	}
	if got := b.pending(""); got != 30 {
		t.Errorf("I4: %d entries pending before the outcome is known, want 30", got)
	}
	releaseOnce()
	b.waitDrained(20 * time.Second)
	if got := sum(b.tallies("lunch")); got != 30 {
		t.Errorf("I2: total votes %d after the retry, want 30", got)
	}
	if got := r.metric("tally_projector_events_total", "outcome", "duplicate"); got != 30 {
		t.Errorf("duplicate metric %v, want 30: the retry finds every event already recorded", got)
	}
	if got := r.metric("tally_projector_events_total", "outcome", "recorded"); got != 0 {
		t.Errorf("recorded metric %v, want 0: the lost answer was never counted", got)
	}
}

// readAs delivers up to n new entries of shard 0 to consumer without
// acknowledging them, as a projector that dies right after reading would.
func (b *bundle) readAs(consumer string, n int) []redis.XMessage {
	b.t.Helper()
	for _, s := range b.keys.Streams() {
		if err := b.rdb.XGroupCreateMkStream(b.ctx, s, stream.Group, "0").Err(); err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
			b.t.Fatal(err)
		}
	}
	res, err := b.rdb.XReadGroup(b.ctx, &redis.XReadGroupArgs{
		Group: stream.Group, Consumer: consumer, Streams: []string{b.keys.Stream(0), ">"}, Count: int64(n), Block: -1,
	}).Result()
	if err != nil {
		b.t.Fatal(err)
	}
	return res[0].Messages
}

// Redelivery of entries already applied: a consumer committed them and
// died before acknowledging; another one claims them, finds them
// duplicate, and acknowledges them. An entry enqueued twice is a
// duplicate too.
func TestRedeliveryOfAppliedEntries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll("lunch", "pizza", "sushi")
	es := votes("u", 20, "lunch", "pizza", "sushi")
	b.enqueue(es...)
	msgs := b.readAs("dead-consumer", 20)
	events := make([]ledger.Event, len(msgs))
	for i, m := range msgs {
		e, err := stream.Decode(m.Values)
		if err != nil {
			t.Fatal(err)
		}
		events[i] = e
	}
	if _, err := b.store.Append(b.ctx, events); err != nil {
		t.Fatal(err)
	}
	b.enqueue(es[0], es[1]) // the same events again, as a replay would
	cfg := fast("p1")
	// Long enough that p1 never claims back its own entries while a loaded
	// machine applies them, so the claims counted are the dead consumer's.
	cfg.MinIdle = 2 * time.Second
	r := b.start(b.store, cfg)
	b.waitDrained(20 * time.Second)
	if got := r.metric("tally_projector_claimed_total"); got != 20 {
		t.Errorf("claimed %v entries, want 20", got)
	}
	if got := r.metric("tally_projector_events_total", "outcome", "duplicate"); got != 22 {
		t.Errorf("duplicate metric %v, want 22", got)
	}
	if got := sum(b.tallies("lunch")); got != 20 {
		t.Errorf("I2: total votes %d, want 20", got)
	}
}

// A conflicting event id: the same key with another payload is rejected as
// key_reused and changes nothing.
func TestConflictingEventID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll("lunch", "pizza", "sushi")
	r := b.start(b.store, fast("p1"))
	b.enqueue(ballot("alice", "k1", "lunch", "pizza"))
	b.waitDrained(10 * time.Second)
	b.enqueue(ballot("alice", "k1", "lunch", "sushi"))
	b.waitDrained(10 * time.Second)
	if got := b.tallies("lunch"); got["pizza"] != 1 || got["sushi"] != 0 {
		t.Errorf("tallies %v, want pizza 1 sushi 0", got)
	}
	var reason string
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT reason FROM poll_event_rejections WHERE principal_id = 'alice' AND client_event_id = 'k1'`).Scan(&reason); err != nil {
		t.Fatal(err)
	}
	if reason != string(ledger.ReasonKeyReused) {
		t.Errorf("rejection reason %q, want key_reused", reason)
	}
	if got := r.metric("tally_projector_events_total", "outcome", "rejected", "reason", "key_reused"); got != 1 {
		t.Errorf("key_reused metric %v, want 1", got)
	}
}

// A full queue: a large backlog is drained in full batches.
func TestLargeBacklogDrains(t *testing.T) {
	t.Parallel()
	b := setup(t, withShards(2))
	b.poll("lunch", "pizza", "sushi", "tacos")
	const n = 10_000
	b.enqueue(votes("u", n, "lunch", "pizza", "sushi", "tacos")...)
	cfg := fast("p1")
	cfg.BatchSize = 500
	r := b.start(b.store, cfg)
	b.waitDrained(60 * time.Second)
	if got := sum(b.tallies("lunch")); got != n {
		t.Errorf("total votes %d, want %d", got, n)
	}
	if batches := r.metric("tally_projector_batch_size"); batches > n/100 {
		t.Errorf("%v batches for %d entries: the batches were not filled", batches, n)
	}
}

// A consumer killed with entries pending: its batch is abandoned, not
// acknowledged (I4), and another consumer claims and applies it.
func TestKilledConsumerEntriesClaimed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll("lunch", "pizza", "sushi")
	entered := make(chan struct{})
	var once atomic.Bool
	stuck := applierFunc(func(ctx context.Context, events []ledger.Event) ([]ledger.Outcome, error) {
		if once.CompareAndSwap(false, true) {
			close(entered)
		}
		<-ctx.Done() // a database that never answers
		return nil, ctx.Err()
	})
	b.enqueue(votes("u", 30, "lunch", "pizza", "sushi")...)
	cfgA := fast("victim")
	cfgA.ShutdownGrace = 50 * time.Millisecond
	a := b.start(stuck, cfgA)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the victim applied nothing")
	}
	a.stop()
	if got := b.pending("victim"); got != 30 {
		t.Fatalf("I4: %d entries pending on the stopped consumer, want 30", got)
	}
	if got := b.ledgerRows(); got != 0 {
		t.Fatalf("%d ledger rows after an abandoned batch", got)
	}
	cfg := fast("rescuer")
	cfg.MinIdle = 2 * time.Second // never its own entries, however loaded the machine
	r := b.start(b.store, cfg)
	b.waitDrained(20 * time.Second)
	if got := r.metric("tally_projector_claimed_total"); got != 30 {
		t.Errorf("claimed %v, want 30", got)
	}
	if got := sum(b.tallies("lunch")); got != 30 {
		t.Errorf("total votes %d, want 30", got)
	}
}

// A projector restarted under the same name re-reads its own pending
// entries at once, without waiting for MinIdle.
func TestRestartReadsOwnPending(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll("lunch", "pizza", "sushi")
	b.enqueue(votes("u", 10, "lunch", "pizza", "sushi")...)
	b.readAs("p1", 10)
	cfg := fast("p1")
	cfg.MinIdle = time.Hour
	r := b.start(b.store, cfg)
	b.waitDrained(10 * time.Second)
	if got := r.metric("tally_projector_claimed_total"); got != 0 {
		t.Errorf("claimed %v, want 0: the entries were its own", got)
	}
}

// Poison: an undecodable entry, one whose fingerprint lies, and one that
// fails in the database, inside a batch of good ones. The good ones
// commit; the bad ones end in the dead-letter stream with their reasons.
func TestPoisonEntriesDeadLettered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll("lunch", "pizza", "sushi")
	app := applierFunc(func(ctx context.Context, events []ledger.Event) ([]ledger.Outcome, error) {
		if contains(events, "boom") {
			return nil, fmt.Errorf("append batch: %w", errPermanent)
		}
		return b.store.Append(ctx, events)
	})
	good := votes("u", 40, "lunch", "pizza", "sushi")
	b.enqueue(good[:20]...)
	badID := b.enqueueRaw(0, stream.FieldVersion, "1", stream.FieldPrincipal, "mallory", "junk", "x")
	b.enqueueRaw(0, legacy(ballot("liar", "k1", "lunch", "pizza"), "sushi")...)
	b.enqueue(ballot("bomber", "boom", "lunch", "sushi"))
	b.enqueue(good[20:]...)
	cfg := claiming("p1")
	cfg.BatchWait = 300 * time.Millisecond // one batch
	r := b.start(app, cfg)
	b.waitDrained(20 * time.Second)
	time.Sleep(2 * cfg.MinIdle) // nothing comes back
	r.stop()
	if got := sum(b.tallies("lunch")); got != 40 {
		t.Errorf("total votes %d, want the 40 good ones", got)
	}
	reasons := map[projector.Reason]projector.DeadLetter{}
	for _, d := range b.deadLetters() {
		reasons[d.Reason] = d
	}
	if d, ok := reasons[projector.ReasonUndecodable]; !ok || d.StreamID != badID || d.Fields["junk"] != "x" || d.Error == "" {
		t.Errorf("undecodable entry: dead letter %+v", d)
	}
	if d, ok := reasons[projector.ReasonFingerprintMismatch]; !ok || d.Fields[stream.FieldPrincipal] != "liar" { // a version 1 entry keeps its fields
		t.Errorf("lying fingerprint: dead letter %+v", d)
	}
	if d, ok := reasons[projector.ReasonFailed]; !ok || key(d) != "boom" || d.Consumer != "p1" || d.Stream != b.keys.Stream(0) {
		t.Errorf("failing entry: dead letter %+v", d)
	}
	if len(reasons) != 3 || len(b.deadLetters()) != 3 {
		t.Errorf("dead letters %+v, want 3", b.deadLetters())
	}
	if got := r.metric("tally_projector_events_total", "outcome", "dead_lettered"); got != 3 {
		t.Errorf("dead_lettered metric %v, want 3", got)
	}
	if got := r.metric("tally_projector_dead_letters"); got != 3 {
		t.Errorf("dead-letter gauge %v, want 3", got)
	}
}

// An entry delivered more than MaxDeliveries times is dead-lettered, not
// applied.
func TestMaxDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll("lunch", "pizza", "sushi")
	b.enqueue(votes("u", 3, "lunch", "pizza")...)
	msgs := b.readAs("crashy", 3)
	// The first entry kept killing its consumers.
	if err := b.rdb.Do(b.ctx, "XCLAIM", b.keys.Stream(0), stream.Group, "crashy", 0, msgs[0].ID, "RETRYCOUNT", 7).Err(); err != nil {
		t.Fatal(err)
	}
	cfg := claiming("p1")
	cfg.MaxDeliveries = 5
	b.start(b.store, cfg)
	b.waitDrained(10 * time.Second)
	ds := b.deadLetters()
	if len(ds) != 1 || ds[0].Reason != projector.ReasonMaxDeliveries || ds[0].StreamID != msgs[0].ID || ds[0].Deliveries != 8 {
		t.Fatalf("dead letters %+v, want the first entry with 8 deliveries", ds)
	}
	if got := sum(b.tallies("lunch")); got != 2 {
		t.Errorf("total votes %d, want 2", got)
	}
}

// PostgreSQL gone and back: the breaker opens, nothing is acknowledged,
// reading stops; PostgreSQL returns, the breaker closes by itself, and the
// backlog drains.
func TestPostgresGoneAndBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll("lunch", "pizza", "sushi")
	fail := transient(t)
	var down atomic.Bool
	down.Store(true)
	app := applierFunc(func(ctx context.Context, events []ledger.Event) ([]ledger.Outcome, error) {
		if down.Load() {
			return nil, fail
		}
		return b.store.Append(ctx, events)
	})
	const n = 1000
	b.enqueue(votes("u", n, "lunch", "pizza", "sushi")...)
	cfg := claiming("p1") // a batch that gives up while PostgreSQL is down stays pending until claimed
	cfg.BatchSize = 50
	cfg.BreakerFailures = 3
	cfg.BreakerOpenFor = 200 * time.Millisecond
	cfg.MaxAttempts = 4
	r := b.start(app, cfg)
	testenv.Eventually(b.t, 10*time.Second, "the breaker to open", func() bool {
		return r.metric("tally_projector_breaker_state") == 2
	})
	time.Sleep(500 * time.Millisecond)
	if got := b.backlog(); got != n {
		t.Errorf("I4: backlog %d while PostgreSQL is down, want %d", got, n)
	}
	if got := b.pending(""); got >= n/2 {
		t.Errorf("%d of %d entries read while the breaker is open: reading did not stop", got, n)
	}
	if got := b.ledgerRows(); got != 0 {
		t.Fatalf("%d ledger rows while PostgreSQL is down", got)
	}
	down.Store(false)
	b.waitDrained(30 * time.Second)
	if got := r.metric("tally_projector_breaker_state"); got != 0 {
		t.Errorf("breaker state %v after recovery, want 0 (closed)", got)
	}
	if got := sum(b.tallies("lunch")); got != n {
		t.Errorf("total votes %d, want %d", got, n)
	}
	if len(b.deadLetters()) != 0 {
		t.Errorf("dead letters after an outage: %+v", b.deadLetters())
	}
}

// Redis killed and started again (its data on disk): reads and
// acknowledgements fail for a while, the projector keeps going, and
// everything ends applied once, with nothing left pending.
func TestRedisRestart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := testenv.StartRedis(t)
	b.rdb = redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { b.rdb.Close() })
	b.poll("lunch", "pizza", "sushi")
	var applied atomic.Int64
	app := applierFunc(func(ctx context.Context, events []ledger.Event) ([]ledger.Outcome, error) {
		outcomes, err := b.store.Append(ctx, events)
		if err == nil {
			applied.Add(int64(len(events)))
		}
		time.Sleep(5 * time.Millisecond) // let the kill fall between commit and ack
		return outcomes, err
	})
	const n = 3000
	b.enqueue(votes("u", n, "lunch", "pizza", "sushi")...)
	cfg := fast("p1")
	cfg.BatchSize = 50
	cfg.MinIdle = 500 * time.Millisecond
	r := b.start(app, cfg)
	testenv.Eventually(b.t, 10*time.Second, "a first batch applied", func() bool { return applied.Load() > 0 })
	srv.Kill()
	time.Sleep(5 * time.Second) // longer than go-redis waits for a connection
	if got := b.ledgerRows(); got >= n {
		t.Fatalf("all %d events applied before Redis went down: the test proves nothing", got)
	}
	srv.Start()
	// go-redis answers with the last dial error for a moment after a
	// server comes back.
	testenv.Eventually(b.t, 10*time.Second, "Redis to answer after its restart", func() bool { return b.rdb.Ping(b.ctx).Err() == nil })
	b.waitDrained(30 * time.Second)
	r.stop()
	if got := sum(b.tallies("lunch")); got != n {
		t.Errorf("total votes %d, want %d", got, n)
	}
	b.finish() // before the cleanup closes its Redis client
}

// When not one entry of a batch commits, the database is suspect, not the
// entries: they stay pending, and are dead-lettered only once delivered
// more than MaxDeliveries times, with the last error.
func TestAllFailingBatchStaysPending(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll("lunch", "pizza", "sushi")
	var calls atomic.Int64
	broken := applierFunc(func(ctx context.Context, events []ledger.Event) ([]ledger.Outcome, error) {
		calls.Add(1)
		return nil, fmt.Errorf("append batch: relation \"poll_events\" does not exist: %w", errPermanent)
	})
	b.enqueue(votes("u", 4, "lunch", "pizza", "sushi")...)
	cfg := claiming("p1")
	cfg.MaxDeliveries = 2
	b.start(broken, cfg)
	testenv.Eventually(b.t, 10*time.Second, "the batch to be bisected", func() bool { return calls.Load() >= 7 })
	if ds := b.deadLetters(); len(ds) != 0 {
		t.Fatalf("dead letters after the first delivery of a batch that failed whole: %+v", ds)
	}
	if got := b.pending(""); got != 4 {
		t.Errorf("%d entries pending, want 4", got)
	}
	b.waitDrained(20 * time.Second)
	ds := b.deadLetters()
	if len(ds) != 4 {
		t.Fatalf("%d dead letters, want 4", len(ds))
	}
	for _, d := range ds {
		if d.Reason != projector.ReasonMaxDeliveries || !strings.Contains(d.Error, "does not exist") || d.Deliveries != 3 {
			t.Errorf("dead letter %s: reason %s, deliveries %d, error %q", d.ID, d.Reason, d.Deliveries, d.Error)
		}
	}
}

// A poison entry alone in its worker's batch, while the other worker's
// batches commit: the database takes writes, so the entry is at fault and
// is dead-lettered at once (reason failed), not kept pending until it has
// been delivered MaxDeliveries times. The poison's worker is held until
// the other has committed, so this also shows that one slow worker does
// not starve the others.
func TestPoisonAloneInItsLane(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll("lunch", "pizza", "sushi")
	// The good batches wait for the poison's batch to start, and the
	// poison's batch (when alone) for the projector to have counted a
	// good one as recorded, which it does after noting the commit.
	poisonStarted := make(chan struct{})
	var startOnce sync.Once
	var current atomic.Pointer[running]
	recorded := func() bool {
		r := current.Load()
		return r != nil && r.metric("tally_projector_events_total", "outcome", "recorded") > 0
	}
	app := applierFunc(func(ctx context.Context, events []ledger.Event) ([]ledger.Outcome, error) {
		if contains(events, "k-broken") {
			startOnce.Do(func() { close(poisonStarted) })
			for deadline := time.Now().Add(10 * time.Second); len(events) == 1 && !recorded() && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
			return nil, fmt.Errorf("append batch: %w", errPermanent)
		}
		select {
		case <-poisonStarted:
		case <-time.After(10 * time.Second):
		}
		return b.store.Append(ctx, events)
	})
	cfg := fast("p1")
	cfg.Workers = 2
	cfg.MaxDeliveries = 100
	cfg.MinIdle = time.Minute // no redelivery within the test
	r := b.start(app, cfg)
	current.Store(r)
	b.enqueue(ballot("alice", "k-broken", "lunch", "pizza"))
	testenv.Receive(t, poisonStarted, 10*time.Second, "alice's batch, alice alone, to reach the ledger")
	b.enqueue(votes("u", 200, "lunch", "pizza", "sushi")...)
	b.waitDrained(10 * time.Second)
	ds := b.deadLetters()
	if len(ds) != 1 || ds[0].Reason != projector.ReasonFailed || key(ds[0]) != "k-broken" {
		t.Fatalf("dead letters %+v, want alice's entry alone, reason failed", ds)
	}
	if got := sum(b.tallies("lunch")); got != 200 {
		t.Errorf("total votes %d, want 200", got)
	}
}

// PostgreSQL connections killed under the projector again and again
// (pg_terminate_backend), some of them during COMMIT: every entry ends
// applied once.
func TestPostgresConnectionsKilled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll("lunch", "pizza", "sushi")
	const n = 8000
	b.enqueue(votes("u", n, "lunch", "pizza", "sushi")...)
	admin, err := pgxpool.New(b.ctx, testenv.DatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	cfg := claiming("p1")
	cfg.BatchSize = 50
	cfg.BreakerFailures = 1000
	r := b.start(b.store, cfg)
	// Kill for at most 10s (a loaded machine can make a batch outlast the
	// pause between kills, and then nothing would ever commit), then let
	// the projector drain what is left.
	var kills int64
	for stopKilling := time.Now().Add(10 * time.Second); !b.drained() && time.Now().Before(stopKilling); {
		var killed int64
		if err := admin.QueryRow(b.ctx, `
SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE datname = $1 AND pid <> pg_backend_pid()`, b.db.Name).Scan(&killed); err != nil {
			t.Fatal(err)
		}
		kills += killed
		time.Sleep(time.Duration(20+kills%30) * time.Millisecond)
	}
	b.waitDrained(time.Minute)
	r.stop()
	b.db.Pool.Reset() // drop the connections killed under the pool
	if kills == 0 {
		t.Fatal("no connection was killed: the test proves nothing")
	}
	t.Logf("%d connections killed", kills)
	if got := sum(b.tallies("lunch")); got != n {
		t.Errorf("total votes %d, want %d", got, n)
	}
	if ds := b.deadLetters(); len(ds) != 0 {
		t.Errorf("%d dead letters, first %+v", len(ds), ds[0])
	}
}
