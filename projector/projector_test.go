package projector_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"tally/internal/testenv"
	"tally/ledger"
	"tally/projector"
	"tally/stream"
	"tally/vote"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m))
}

// bundle is what a projector test needs: a fresh ledger, a unique stream
// prefix on the shared Redis, and the entries the test enqueued.
type bundle struct {
	t     testing.TB
	ctx   context.Context
	db    testenv.DB
	store *ledger.Store
	rdb   redis.UniversalClient
	keys  stream.Keys

	mu      sync.Mutex
	sent    []stream.Entry // every well-formed entry enqueued, in order
	running []*running     // every projector started

	finishOnce sync.Once
}

// config is where setup runs a test's projectors: the Redis of rdb, under
// prefix, with shards stream shards. A field left zero is the fixture's
// own: a unique prefix on the shared Redis, one shard.
type config struct {
	rdb    redis.UniversalClient
	prefix string
	shards int
}

// option changes the config setup makes a bundle from.
type option func(*config)

// withRedis has the streams on rdb under prefix rather than under a
// unique prefix on the shared Redis.
func withRedis(rdb redis.UniversalClient, prefix string) option {
	return func(c *config) { c.rdb, c.prefix = rdb, prefix }
}

// withShards spreads the votes over n stream shards rather than one.
func withShards(n int) option { return func(c *config) { c.shards = n } }

// setup makes a bundle as opts say: a fresh ledger, and streams under a
// unique prefix on the shared Redis in one shard unless they say
// otherwise. Its cleanup runs finish for a test that started projectors
// and did not fail, and stops them all.
func setup(t testing.TB, opts ...option) *bundle {
	t.Helper()
	c := config{shards: 1}
	for _, o := range opts {
		o(&c)
	}
	if c.rdb == nil {
		c.rdb, c.prefix = testenv.Redis(t)
	}
	db := testenv.Postgres(t)
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := stream.NewKeys(c.prefix, c.shards)
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{t: t, ctx: context.Background(), db: db, store: store, rdb: c.rdb, keys: keys}
	t.Cleanup(func() {
		if b.started() && !t.Failed() {
			b.finish()
		}
		b.stopAll()
	})
	return b
}

// finish checks the end state of a test that ran projectors: the streams
// drain, the projectors stop, and checkInvariants holds. setup registers
// it for the end of every test that started a projector; a test that
// needs it earlier (before it closes a client the check uses) calls it,
// and it runs once.
func (b *bundle) finish() {
	b.t.Helper()
	b.finishOnce.Do(func() {
		// Not Eventually: a test that left a backlog still stops its
		// projectors and checks the invariants.
		deadline := time.Now().Add(30 * time.Second)
		for !b.drained() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if !b.drained() {
			b.t.Errorf("at the end of the test, after 30s: backlog %d, pending %d; want both 0", b.backlog(), b.pending(""))
		}
		b.stopAll()
		b.checkInvariants()
	})
}

func (b *bundle) started() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.running) > 0
}

// stopAll stops every projector started, the last one first.
func (b *bundle) stopAll() {
	b.mu.Lock()
	rs := slices.Clone(b.running)
	b.mu.Unlock()
	for _, r := range slices.Backward(rs) {
		r.stop()
	}
}

func (b *bundle) poll(id string, choices ...string) {
	b.t.Helper()
	if err := b.store.CreatePoll(b.ctx, ledger.Poll{ID: id, Title: "poll " + id, OpensAt: time.Unix(0, 0), Choices: choices}); err != nil {
		b.t.Fatalf("create poll %s: %v", id, err)
	}
}

// ballot is a well-formed stream entry.
func ballot(principal, key, poll, candidate string) stream.Entry {
	return stream.Entry{
		PrincipalID: principal, ClientEventID: key, PollID: poll, CandidateID: candidate,
		ReceivedAt: time.Now().UTC().Truncate(time.Microsecond),
	}
}

// key is the client event id of a dead letter's original entry.
func key(d projector.DeadLetter) string {
	_, k, _ := d.Original()
	return k
}

// legacy is e in version 1's field-per-part layout, as intake wrote
// entries before the single-field encoding, with the fingerprint of
// answer (e's own, unless a test makes it lie).
func legacy(e stream.Entry, answer string) []string {
	return []string{
		stream.FieldVersion, "1", stream.FieldPrincipal, e.PrincipalID, stream.FieldEventID, e.ClientEventID,
		stream.FieldPoll, e.PollID, stream.FieldCandidate, e.Answer(),
		stream.FieldFingerprint, vote.FingerprintHex(e.PollID, answer),
		stream.FieldReceivedAt, strconv.FormatInt(e.ReceivedAt.UnixMicro(), 10),
	}
}

// enqueue adds entries to their principal's shard stream, as intake does,
// pipelined in chunks.
func (b *bundle) enqueue(es ...stream.Entry) {
	b.t.Helper()
	for start := 0; start < len(es); start += 5000 {
		chunk := es[start:min(start+5000, len(es))]
		_, err := b.rdb.Pipelined(b.ctx, func(pipe redis.Pipeliner) error {
			for _, e := range chunk {
				pipe.XAdd(b.ctx, &redis.XAddArgs{Stream: b.keys.Stream(b.keys.ShardOf(e.PrincipalID)), Values: stream.Values(e)})
			}
			return nil
		})
		if err != nil {
			b.t.Fatalf("enqueue: %v", err)
		}
	}
	b.mu.Lock()
	b.sent = append(b.sent, es...)
	b.mu.Unlock()
}

// enqueueRaw adds an entry with arbitrary fields to shard's stream.
func (b *bundle) enqueueRaw(shard int, values ...string) string {
	b.t.Helper()
	id, err := b.rdb.XAdd(b.ctx, &redis.XAddArgs{Stream: b.keys.Stream(shard), Values: values}).Result()
	if err != nil {
		b.t.Fatal(err)
	}
	return id
}

// applierFunc turns a function into a projector.Applier, for fault
// injection around the real ledger.
type applierFunc func(ctx context.Context, events []ledger.Event) ([]ledger.Outcome, error)

func (f applierFunc) Append(ctx context.Context, events []ledger.Event) ([]ledger.Outcome, error) {
	return f(ctx, events)
}

// fast is a configuration with short waits, for tests. Its MinIdle is
// long, so that no entry is claimed within a test however loaded the
// machine: a test about claims starts from claiming.
func fast(consumer string) projector.Config {
	return projector.Config{
		Consumer:      consumer,
		BatchSize:     100,
		BatchWait:     20 * time.Millisecond,
		MinIdle:       time.Hour,
		ClaimInterval: 50 * time.Millisecond,
		BackoffMin:    5 * time.Millisecond,
		BackoffMax:    40 * time.Millisecond,
		ShutdownGrace: 2 * time.Second,
		StatsInterval: 50 * time.Millisecond,
	}
}

// claiming is fast for a test about claims: entries left pending are
// claimed after 300ms.
func claiming(consumer string) projector.Config {
	cfg := fast(consumer)
	cfg.MinIdle = 300 * time.Millisecond
	return cfg
}

// running is a projector running in its own goroutine.
type running struct {
	t    testing.TB
	p    *projector.Projector
	reg  *prometheus.Registry
	logs *testenv.LogBuffer // what it logged (warnings and errors), also in the test's output
	stop func()
}

// start runs a projector on app until stop is called or the test ends
// (see finish).
func (b *bundle) start(app projector.Applier, cfg projector.Config) *running {
	b.t.Helper()
	reg := prometheus.NewRegistry()
	logs := &testenv.LogBuffer{}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(b.t.Output(), logs), &slog.HandlerOptions{Level: slog.LevelWarn}))
	p, err := projector.New(app, b.rdb, b.keys, cfg, log, reg)
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	r := &running{t: b.t, p: p, reg: reg, logs: logs}
	r.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					b.t.Errorf("Run returned %v, want nil", err)
				}
			case <-time.After(15 * time.Second):
				b.t.Errorf("projector %s did not stop within 15s of its context's end", cfg.Consumer)
			}
		})
	}
	b.mu.Lock()
	b.running = append(b.running, r)
	b.mu.Unlock()
	return r
}

// metric returns the value of a counter or gauge, or the sample count of a
// histogram, summed over the series whose labels include labels.
func (r *running) metric(name string, labels ...string) float64 {
	r.t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		r.t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if labelValue(m, labels[i]) != labels[i+1] {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return sum
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// backlog is the summed length of the main streams.
func (b *bundle) backlog() int64 {
	b.t.Helper()
	var n int64
	for _, s := range b.keys.Streams() {
		l, err := b.rdb.XLen(b.ctx, s).Result()
		if err != nil {
			b.t.Fatal(err)
		}
		n += l
	}
	return n
}

// pending is the number of delivered, unacknowledged entries, optionally
// only those of one consumer.
func (b *bundle) pending(consumer string) int64 {
	b.t.Helper()
	var n int64
	for _, s := range b.keys.Streams() {
		if consumer == "" {
			p, err := b.rdb.XPending(b.ctx, s, stream.Group).Result()
			if err != nil && !redis.HasErrorPrefix(err, "NOGROUP") {
				b.t.Fatal(err)
			}
			if p != nil {
				n += p.Count
			}
			continue
		}
		ps, err := b.rdb.XPendingExt(b.ctx, &redis.XPendingExtArgs{Stream: s, Group: stream.Group, Start: "-", End: "+", Count: 1 << 20, Consumer: consumer}).Result()
		if err != nil {
			b.t.Fatal(err)
		}
		n += int64(len(ps))
	}
	return n
}

// drained reports every entry applied and acknowledged: streams empty,
// nothing pending.
func (b *bundle) drained() bool { return b.backlog() == 0 && b.pending("") == 0 }

// waitDrained waits for drained. A Redis that fails a read meanwhile (one
// just restarted, whose client still answers with its last dial error)
// is waited for too, not a failure.
func (b *bundle) waitDrained(d time.Duration) {
	b.t.Helper()
	testenv.Eventually(b.t, d, "the streams drained", func() error {
		var backlog, pending int64
		for _, s := range b.keys.Streams() {
			l, err := b.rdb.XLen(b.ctx, s).Result()
			if err != nil {
				return err
			}
			p, err := b.rdb.XPending(b.ctx, s, stream.Group).Result()
			if err != nil && !redis.HasErrorPrefix(err, "NOGROUP") {
				return err
			}
			backlog += l
			if p != nil {
				pending += p.Count
			}
		}
		if backlog != 0 || pending != 0 {
			return fmt.Errorf("backlog %d, pending %d", backlog, pending)
		}
		return nil
	})
}

// ledgerRows counts the ledger rows.
func (b *bundle) ledgerRows() int64 {
	b.t.Helper()
	var n int64
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM poll_events`).Scan(&n); err != nil {
		b.t.Fatal(err)
	}
	return n
}

// deadLetters returns every dead letter.
func (b *bundle) deadLetters() []projector.DeadLetter {
	b.t.Helper()
	ds, err := projector.NewDeadLetters(b.rdb, b.keys).List(b.ctx, 0)
	if err != nil {
		b.t.Fatal(err)
	}
	return ds
}

// checkInvariants checks the ledger against what the test enqueued,
// replayed through a model of the ledger's rules (expectFates):
//   - I1, I2: every well-formed entry that was not dead-lettered is
//     recorded once, with its payload, or rejected with the expected
//     reason, and the ledger holds nothing else;
//   - the tallies equal the recorded entries, and rebuild finds no
//     differing tally (I3).
func (b *bundle) checkInvariants() {
	b.t.Helper()
	dead := map[entryKey]bool{}
	for _, d := range b.deadLetters() {
		principal, key, _ := d.Original()
		dead[entryKey{principal, key}] = true
	}
	b.mu.Lock()
	want := expectFates(b.sent, dead)
	b.mu.Unlock()
	b.compare("ledger row", want.recorded, b.rows(`SELECT principal_id, client_event_id, poll_id || ' ' || candidate_id FROM poll_events`))
	b.compare("rejection", want.rejected, b.rows(`SELECT principal_id, client_event_id, reason FROM poll_event_rejections`))
	for poll, tally := range want.tallies {
		got := b.tallies(poll)
		maps.DeleteFunc(got, func(_ string, votes int64) bool { return votes == 0 })
		if !maps.Equal(got, tally) {
			b.t.Errorf("I3: poll %s tallies %v, want %v from the entries recorded", poll, got, tally)
		}
	}
	rep, err := b.store.Rebuild(b.ctx, "")
	if err != nil {
		b.t.Fatal(err)
	}
	if rep.Differing != 0 {
		b.t.Errorf("I3: rebuild finds %d differing tallies: %+v", rep.Differing, rep.Diffs())
	}
}

// entryKey is an entry's idempotency key: principal and client key.
type entryKey struct{ principal, key string }

// fates is what the ledger must hold after the entries a test sent.
type fates struct {
	recorded map[entryKey]string         // -> "poll candidate"
	rejected map[entryKey]string         // -> reason
	tallies  map[string]map[string]int64 // poll -> candidate -> votes
}

// expectFates replays sent, in order, through the ledger's rules for open
// polls with valid choices, which every test uses: a key seen before is a
// duplicate with the same payload and key_reused with another (one
// rejection record per key); a principal's second answer in a poll is
// already_responded. Each principal's entries reach the ledger in the
// order sent, so the model's order is the ledger's. Entries whose key was
// dead-lettered never reached it.
func expectFates(sent []stream.Entry, dead map[entryKey]bool) fates {
	f := fates{recorded: map[entryKey]string{}, rejected: map[entryKey]string{}, tallies: map[string]map[string]int64{}}
	payload := map[entryKey]string{}
	answered := map[[2]string]bool{} // principal, poll
	for _, e := range sent {
		k, p := entryKey{e.PrincipalID, e.ClientEventID}, e.PollID+" "+e.CandidateID
		if dead[k] {
			continue
		}
		if first, seen := payload[k]; seen {
			if first != p && f.rejected[k] == "" {
				f.rejected[k] = string(ledger.ReasonKeyReused)
			}
			continue
		}
		payload[k] = p
		if answered[[2]string{e.PrincipalID, e.PollID}] {
			f.rejected[k] = string(ledger.ReasonAlreadyResponded)
			continue
		}
		answered[[2]string{e.PrincipalID, e.PollID}] = true
		f.recorded[k] = p
		if f.tallies[e.PollID] == nil {
			f.tallies[e.PollID] = map[string]int64{}
		}
		f.tallies[e.PollID][e.CandidateID]++
	}
	return f
}

// rows reads (principal, key, value) rows.
func (b *bundle) rows(sql string) map[entryKey]string {
	b.t.Helper()
	rs, err := b.db.Pool.Query(b.ctx, sql)
	if err != nil {
		b.t.Fatal(err)
	}
	out := map[entryKey]string{}
	var k entryKey
	var v string
	_, err = pgx.ForEachRow(rs, []any{&k.principal, &k.key, &v}, func() error {
		out[k] = v
		return nil
	})
	if err != nil {
		b.t.Fatal(err)
	}
	return out
}

// compare reports the differences between the rows the model expects and
// those the ledger holds, the first five of each kind.
func (b *bundle) compare(what string, want, got map[entryKey]string) {
	b.t.Helper()
	var diffs []string
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			diffs = append(diffs, fmt.Sprintf("(%s, %s): %s %q, want %q", k.principal, k.key, what, g, w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("(%s, %s): unexpected %s %q", k.principal, k.key, what, g))
		}
	}
	slices.Sort(diffs)
	for i, d := range diffs {
		if i == 5 {
			b.t.Errorf("... %d differences in all", len(diffs))
			break
		}
		b.t.Errorf("%s", d)
	}
}

// tallies returns the projection of a poll, candidate -> votes.
func (b *bundle) tallies(poll string) map[string]int64 {
	b.t.Helper()
	res, err := b.store.Results(b.ctx, poll)
	if err != nil {
		b.t.Fatal(err)
	}
	out := map[string]int64{}
	for _, r := range res.Results {
		out[r.CandidateID] = r.Votes
	}
	return out
}

var (
	transientOnce sync.Once
	transientErr  error
)

// transient returns an error the ledger itself reports as retryable: an
// Append on a server that refuses connections.
func transient(t testing.TB) error {
	t.Helper()
	transientOnce.Do(func() {
		pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2")
		if err != nil {
			transientErr = err
			return
		}
		defer pool.Close()
		dead, err := ledger.New(pool, ledger.Config{})
		if err != nil {
			transientErr = err
			return
		}
		_, transientErr = dead.Append(context.Background(), []ledger.Event{ballot("p", "k", "poll", "c")})
	})
	if transientErr == nil || !ledger.IsRetryable(transientErr) {
		t.Fatalf("want a retryable error from a refused connection, got %v", transientErr)
	}
	return transientErr
}

// votes returns n votes of distinct principals on poll, spread over its
// choices.
func votes(prefix string, n int, poll string, choices ...string) []stream.Entry {
	out := make([]stream.Entry, n)
	for i := range out {
		out[i] = ballot(fmt.Sprintf("%s%d", prefix, i), "k1", poll, choices[i%len(choices)])
	}
	return out
}

func contains(events []ledger.Event, key string) bool {
	for _, e := range events {
		if e.ClientEventID == key {
			return true
		}
	}
	return false
}

var errPermanent = errors.New("simulated permanent failure")

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	keys, _ := stream.NewKeys(prefix, 1)
	db := testenv.Postgres(t)
	store, err := ledger.New(db.Pool, ledger.Config{MaxBatch: 500})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  projector.Config
		want string // substring of the error, "" for none
	}{
		{"defaults above the ledger's max batch", projector.Config{}, "more than the ledger takes"},
		{"fits", projector.Config{BatchSize: 500}, ""},
		{"negative batch", projector.Config{BatchSize: -1}, "batch size must be at least 1"},
		{"backoff bounds", projector.Config{BatchSize: 10, BackoffMin: time.Second, BackoffMax: time.Millisecond}, "the longest backoff must be at least the least backoff (1s)"},
		{"max deliveries", projector.Config{BatchSize: 10, MaxDeliveries: -1}, "max deliveries"},
		{"negative wait", projector.Config{BatchSize: 10, BatchWait: -time.Second}, "batch wait"},
		{"one worker", projector.Config{BatchSize: 10, Workers: 1}, ""},
		{"most workers", projector.Config{BatchSize: 10, Workers: projector.MaxWorkers}, ""},
		{"negative workers", projector.Config{BatchSize: 10, Workers: -1}, "workers must be between 1 and 16"},
		{"too many workers", projector.Config{BatchSize: 10, Workers: projector.MaxWorkers + 1}, "workers must be between 1 and 16"},
	} {
		_, err := projector.New(store, rdb, keys, tc.cfg, nil, nil)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: unexpected error %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}
