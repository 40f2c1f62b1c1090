package intake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"tally/internal/testenv"
	"tally/ledger"
	"tally/stream"
)

// The batcher's own tests: votes go through batcher.do against a real Redis
// (the shared one, under a unique key prefix), without HTTP or PostgreSQL.

// batcherFixture is a batcher on one stream shard, with a poll "p" of
// choices a and b to vote on.
type batcherFixture struct {
	b     *batcher
	rdb   redis.UniversalClient
	keys  stream.Keys
	args  scriptArgs
	poll  *pollInfo
	sizes *batchSizes
}

// batchSizes is the batcher's histogram, keeping the size of every
// pipeline sent.
type batchSizes struct {
	prometheus.Histogram
	mu  sync.Mutex
	got []int
}

func (h *batchSizes) Observe(v float64) {
	h.mu.Lock()
	h.got = append(h.got, int(v))
	h.mu.Unlock()
	h.Histogram.Observe(v)
}

func (h *batchSizes) list() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.got)
}

// newBatcherFixture makes a batcher on rdb; a nil rdb means the shared
// test Redis. cfg gets its defaults.
func newBatcherFixture(t *testing.T, rdb redis.UniversalClient, cfg Config) *batcherFixture {
	t.Helper()
	return newShardedBatcherFixture(t, rdb, cfg, 1)
}

// newShardedBatcherFixture is newBatcherFixture on shards stream shards.
func newShardedBatcherFixture(t *testing.T, rdb redis.UniversalClient, cfg Config, shards int) *batcherFixture {
	t.Helper()
	prefix := testenv.RandomName("t")
	if rdb == nil {
		rdb, prefix = testenv.Redis(t)
	}
	keys, err := stream.NewKeys(prefix, shards)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg = cfg.withDefaults()
	sizes := &batchSizes{Histogram: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "batch_size"})}
	f := &batcherFixture{
		b: newBatcher(rdb, cfg, sizes), rdb: rdb, keys: keys, args: newScriptArgs(cfg, keys),
		poll:  newPollInfo(ledger.Poll{ID: "p", Choices: []string{"a", "b"}}, time.Now()),
		sizes: sizes,
	}
	t.Cleanup(func() { f.wantIdle(t) })
	return f
}

// ballot is one vote to send: a principal, its event id and its candidate.
type ballot struct{ principal, eventID, candidate string }

// do sends v through the batcher with deadline and decodes the answer.
// The script skips its check of an absent record (ledger_check_test.go
// tests it): these tests are about pipelines.
func (f *batcherFixture) do(v ballot, deadline time.Time) (enqueueResult, error) {
	c := f.args.call(newVoter(ledger.Principal{ID: v.principal}, f.keys), v.eventID, f.poll,
		f.poll.choice([]byte(v.candidate)), time.Now(), false)
	got := make(chan scriptReply, 1)
	go func() { got <- f.b.do(context.Background(), c, deadline) }()
	select {
	case rep := <-got:
		if rep.err != nil {
			return enqueueResult{}, rep.err
		}
		return decodeEnqueue(rep.res)
	case <-time.After(time.Until(deadline) + 5*time.Second):
		return enqueueResult{}, errNoAnswer
	}
}

// errNoAnswer: the batcher lost track of a vote, which it must answer by
// its deadline.
var errNoAnswer = errors.New("the batcher did not answer the vote 5s after its deadline")

// send is do with a deadline a few seconds away.
func (f *batcherFixture) send(v ballot) (outcome, error) {
	res, err := f.do(v, time.Now().Add(5*time.Second))
	return res.outcome, err
}

// streamIDs are the event ids of the stream's entries, in order.
func (f *batcherFixture) streamIDs(t *testing.T) []string {
	t.Helper()
	msgs, err := f.rdb.XRange(context.Background(), f.keys.Stream(0), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range msgs {
		e, err := stream.Decode(m.Values)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e.ClientEventID)
	}
	return ids
}

// occupy takes every pipeline, as leaders under way would: votes sent
// meanwhile wait in pending. release hands the pipeline back the way a
// leader does once its own vote is answered: a new leader sends what
// waits. They need Config.EnqueuePipelines 1.
func (f *batcherFixture) occupy(t *testing.T) {
	t.Helper()
	f.b.mu.Lock()
	defer f.b.mu.Unlock()
	if f.b.maxInFlight != 1 || f.b.leaders != 0 {
		t.Fatalf("occupy needs one idle pipeline, have %d of %d busy", f.b.leaders, f.b.maxInFlight)
	}
	f.b.leaders = 1
}

func (f *batcherFixture) release() { go f.b.lead(context.Background(), nil) }

// waitPending waits until n votes wait in pending.
func (f *batcherFixture) waitPending(t *testing.T, n int) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, fmt.Sprintf("%d votes pending", n), func() error {
		f.b.mu.Lock()
		got := len(f.b.pending)
		f.b.mu.Unlock()
		if got != n {
			return fmt.Errorf("%d pending", got)
		}
		return nil
	})
}

// wantIdle checks that the batcher lost track of nothing: within a few
// seconds no vote is pending or under way and no leader is left.
func (f *batcherFixture) wantIdle(t *testing.T) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, "the batcher to be idle", func() error {
		f.b.mu.Lock()
		pending, flying, leaders := len(f.b.pending), len(f.b.flying), f.b.leaders
		f.b.mu.Unlock()
		if pending != 0 || flying != 0 || leaders != 0 {
			return fmt.Errorf("%d votes pending, %d pipelines under way, %d leaders", pending, flying, leaders)
		}
		return nil
	})
}

// sendHeld sends votes while the pipeline is occupied, so that they wait
// in pending together, then releases it: they go in one pipeline.
func (f *batcherFixture) sendHeld(t *testing.T, votes []ballot) ([]outcome, []error) {
	t.Helper()
	f.occupy(t)
	outs, errs, wg := f.goSend(votes)
	f.waitPending(t, len(votes))
	f.release()
	testenv.WaitGroup(t, wg, 15*time.Second, "the answers to votes sent while the pipeline was held")
	return outs, errs
}

// sendAll sends every vote from a goroutine of its own and returns each
// vote's outcome and error.
func (f *batcherFixture) sendAll(t *testing.T, votes []ballot) ([]outcome, []error) {
	t.Helper()
	outs, errs, wg := f.goSend(votes)
	testenv.WaitGroup(t, wg, 15*time.Second, "the answers to the votes sent")
	return outs, errs
}

// goSend starts sending every vote from a goroutine of its own; each
// vote's outcome and error are set once wg is done.
func (f *batcherFixture) goSend(votes []ballot) (outs []outcome, errs []error, wg *sync.WaitGroup) {
	outs, errs, wg = make([]outcome, len(votes)), make([]error, len(votes)), &sync.WaitGroup{}
	for i, v := range votes {
		wg.Go(func() { outs[i], errs[i] = f.send(v) })
	}
	return outs, errs, wg
}

// TestBatcherConcurrentVotes sends votes of every outcome from many
// goroutines at once: each is answered its own outcome, every vote goes in
// exactly one pipeline of at most EnqueueBatch, and the stream holds what
// was accepted.
func TestBatcherConcurrentVotes(t *testing.T) {
	t.Parallel()
	const burst = 5
	// A rate so low that only the burst counts: exactly burst votes of one
	// principal are accepted.
	f := newBatcherFixture(t, nil, Config{EnqueueBatch: 16, EnqueuePipelines: 2, Rate: 0.001, Burst: burst})
	var seeds []ballot
	for i := range 10 {
		seeds = append(seeds, ballot{"seed" + strconv.Itoa(i), "r" + strconv.Itoa(i), "a"})
	}
	for _, v := range seeds {
		if out, err := f.send(v); err != nil || out != outAccepted {
			t.Fatalf("seed vote %v: %s, %v", v, out, err)
		}
	}

	var votes []ballot
	want := map[int]outcome{}
	for i := range 100 {
		want[len(votes)] = outAccepted
		votes = append(votes, ballot{"n" + strconv.Itoa(i), "e" + strconv.Itoa(i), "a"})
	}
	for _, s := range seeds {
		want[len(votes)] = outReplay
		votes = append(votes, s)
		want[len(votes)] = outConflict
		votes = append(votes, ballot{s.principal, s.eventID, "b"})
	}
	busy := len(votes)
	for i := range burst + 3 {
		votes = append(votes, ballot{"busy", "b" + strconv.Itoa(i), "a"})
	}
	outs, errs := f.sendAll(t, votes)

	accepted := map[string]bool{}
	for _, s := range seeds {
		accepted[s.eventID] = true
	}
	limited := 0
	for i, v := range votes {
		if errs[i] != nil {
			t.Fatalf("vote %v: %v", v, errs[i])
		}
		if i >= busy {
			switch outs[i] {
			case outAccepted:
				accepted[v.eventID] = true
			case outLimited:
				limited++
			default:
				t.Errorf("vote %v of the busy principal: %s, want accepted or rate_limited", v, outs[i])
			}
			continue
		}
		if outs[i] != want[i] {
			t.Errorf("vote %v: %s, want %s", v, outs[i], want[i])
		}
		if outs[i] == outAccepted {
			accepted[v.eventID] = true
		}
	}
	if limited != 3 {
		t.Errorf("%d votes of the busy principal limited, want 3 (burst %d of %d)", limited, burst, burst+3)
	}
	got := f.streamIDs(t)
	if len(got) != len(accepted) {
		t.Fatalf("stream holds %d entries, want the %d accepted votes", len(got), len(accepted))
	}
	for _, id := range got {
		if !accepted[id] {
			t.Fatalf("stream holds %q, which was not accepted", id)
		}
	}
	sizes, total := f.sizes.list(), 0
	for _, n := range sizes {
		if n < 1 || n > 16 {
			t.Fatalf("a pipeline of %d votes; EnqueueBatch is 16", n)
		}
		total += n
	}
	if sent := len(seeds) + len(votes); total != sent {
		t.Fatalf("pipelines carried %d votes, %d were sent", total, sent)
	}
}

// TestBatcherFlushes checks when a pipeline goes: a vote that finds a
// pipeline free goes at once, alone; votes that waited go in pipelines of
// EnqueueBatch, and what is left goes too, without waiting for more.
func TestBatcherFlushes(t *testing.T) {
	t.Parallel()
	f := newBatcherFixture(t, nil, Config{EnqueueBatch: 4, EnqueuePipelines: 1})
	start := time.Now()
	if out, err := f.send(ballot{"v", "alone", "a"}); err != nil || out != outAccepted {
		t.Fatalf("a vote alone: %s, %v", out, err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("a vote alone took %s", took)
	}
	if got := f.sizes.list(); !slices.Equal(got, []int{1}) {
		t.Fatalf("pipelines of %v votes, want [1]", got)
	}
	f.wantIdle(t)

	var votes []ballot
	for i := range 10 {
		votes = append(votes, ballot{"v" + strconv.Itoa(i), "e" + strconv.Itoa(i), "a"})
	}
	outs, errs := f.sendHeld(t, votes)
	for i := range votes {
		if errs[i] != nil || outs[i] != outAccepted {
			t.Fatalf("vote %v: %s, %v", votes[i], outs[i], errs[i])
		}
	}
	if got := f.sizes.list(); !slices.Equal(got, []int{1, 4, 4, 2}) {
		t.Fatalf("pipelines of %v votes, want [1 4 4 2]", got)
	}
	if n := len(f.streamIDs(t)); n != 11 {
		t.Fatalf("stream holds %d entries, want 11", n)
	}
}

// TestBatcherOnePipelineAnswers puts a new vote, its replay and a
// conflicting reuse of its event id in one pipeline, in that order: each
// is answered its own outcome, and only the first is enqueued.
func TestBatcherOnePipelineAnswers(t *testing.T) {
	t.Parallel()
	f := newBatcherFixture(t, nil, Config{EnqueuePipelines: 1})
	f.occupy(t)
	votes := []ballot{{"v", "e1", "a"}, {"v", "e1", "a"}, {"v", "e1", "b"}}
	outs := make([]outcome, len(votes))
	errs := make([]error, len(votes))
	var wg sync.WaitGroup
	for i, v := range votes {
		wg.Go(func() { outs[i], errs[i] = f.send(v) })
		f.waitPending(t, i+1) // keeps the order in the pipeline
	}
	f.release()
	testenv.WaitGroup(t, &wg, 15*time.Second, "the answers to the three votes")
	for i, want := range []outcome{outAccepted, outReplay, outConflict} {
		if errs[i] != nil || outs[i] != want {
			t.Errorf("vote %v: %s, %v; want %s", votes[i], outs[i], errs[i], want)
		}
	}
	if got := f.sizes.list(); !slices.Equal(got, []int{3}) {
		t.Fatalf("pipelines of %v votes, want [3]", got)
	}
	if got := f.streamIDs(t); !slices.Equal(got, []string{"e1"}) {
		t.Fatalf("stream holds %v, want [e1]", got)
	}
	// And one at a time, the same answers.
	for _, c := range []struct {
		v    ballot
		want outcome
	}{{ballot{"w", "e2", "a"}, outAccepted}, {ballot{"w", "e2", "a"}, outReplay}, {ballot{"w", "e2", "b"}, outConflict}} {
		if out, err := f.send(c.v); err != nil || out != c.want {
			t.Errorf("vote %v: %s, %v; want %s", c.v, out, err, c.want)
		}
	}
}

// TestBatcherDeadline: a vote whose deadline passed is answered errDeadline
// and never sent, whether it came late or waited in pending for a busy
// pipeline; the batcher keeps no trace of it.
func TestBatcherDeadline(t *testing.T) {
	t.Parallel()
	f := newBatcherFixture(t, nil, Config{EnqueuePipelines: 1})
	if _, err := f.do(ballot{"v", "late", "a"}, time.Now().Add(-time.Millisecond)); !errors.Is(err, errDeadline) {
		t.Fatalf("a vote past its deadline: %v, want errDeadline", err)
	}

	f.occupy(t)
	const wait = 150 * time.Millisecond
	start := time.Now()
	_, err := f.do(ballot{"v", "waited", "a"}, start.Add(wait))
	took := time.Since(start)
	if !errors.Is(err, errDeadline) {
		t.Fatalf("a vote that waited past its deadline: %v, want errDeadline", err)
	}
	if took < wait || took > wait+10*time.Second { // loose: see TestBatcherDeadlineInFlight
		t.Fatalf("answered after %s, want about its deadline %s, not when the pipeline frees", took, wait)
	}
	f.waitPending(t, 0)
	f.release()
	f.wantIdle(t)
	if got := f.sizes.list(); len(got) != 0 {
		t.Fatalf("pipelines of %v votes were sent, want none", got)
	}
	if got := f.streamIDs(t); len(got) != 0 {
		t.Fatalf("stream holds %v, want nothing", got)
	}
}

// TestBatcherDeadlineInFlight: a Redis that takes the pipeline and never
// answers costs its votes their deadline, not Config.RedisTimeout; the
// pipeline ends then too, and the batcher keeps no trace of it.
func TestBatcherDeadlineInFlight(t *testing.T) {
	t.Parallel()
	rdb := hungRedis(t)
	f := newBatcherFixture(t, rdb, Config{EnqueuePipelines: 1, RedisTimeout: time.Minute})

	const wait = 200 * time.Millisecond
	start := time.Now()
	votes := []ballot{{"v", "e1", "a"}, {"w", "e2", "a"}}
	_, errs := f.sendAllBy(t, votes, start.Add(wait))
	took := time.Since(start)
	for i, err := range errs {
		if err == nil {
			t.Fatalf("vote %v answered without error by a Redis that never answers", votes[i])
		}
	}
	// The bound is loose: what the test tells apart is the deadline
	// (200ms) from Config.RedisTimeout (a minute), on a machine whose
	// other tests may hold its cores for a second or two (this one once
	// answered after 1.9s under make test's load).
	if took < wait || took > wait+10*time.Second {
		t.Fatalf("answered after %s, want about the deadline %s, far below RedisTimeout %s", took, wait, time.Minute)
	}
	f.wantIdle(t)
}

// sendAllBy is sendAll with one deadline for all; their answers are
// waited for until 10s past it.
func (f *batcherFixture) sendAllBy(t *testing.T, votes []ballot, deadline time.Time) ([]outcome, []error) {
	t.Helper()
	outs := make([]outcome, len(votes))
	errs := make([]error, len(votes))
	var wg sync.WaitGroup
	for i, v := range votes {
		wg.Go(func() {
			res, err := f.do(v, deadline)
			outs[i], errs[i] = res.outcome, err
		})
	}
	testenv.WaitGroup(t, &wg, time.Until(deadline)+10*time.Second, "the answers to votes sent with a deadline")
	return outs, errs
}

// TestBatcherRedisDown: with no Redis to connect to, every vote is
// answered an error at once, not at its deadline.
func TestBatcherRedisDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	f := newBatcherFixture(t, rdb, Config{EnqueueBatch: 4})
	var votes []ballot
	for i := range 20 {
		votes = append(votes, ballot{"v" + strconv.Itoa(i), "e" + strconv.Itoa(i), "a"})
	}
	start := time.Now()
	_, errs := f.sendAllBy(t, votes, start.Add(10*time.Second))
	for i, err := range errs {
		if err == nil || errors.Is(err, errDeadline) {
			t.Fatalf("vote %v with Redis down: %v, want its connection's error", votes[i], err)
		}
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("answered after %s", took)
	}
}

// TestBatcherLoadsScript: a Redis that does not know the script (a fresh
// one) answers NOSCRIPT; the batcher loads it and sends the pipeline again,
// which enqueues each vote once.
func TestBatcherLoadsScript(t *testing.T) {
	t.Parallel()
	server := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: server.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	f := newBatcherFixture(t, rdb, Config{EnqueuePipelines: 1})
	votes := []ballot{{"v", "e1", "a"}, {"w", "e2", "a"}}
	outs, errs := f.sendHeld(t, votes)
	for i := range votes {
		if errs[i] != nil || outs[i] != outAccepted {
			t.Fatalf("vote %v on a Redis without the script: %s, %v", votes[i], outs[i], errs[i])
		}
	}
	if got := f.streamIDs(t); len(got) != 2 {
		t.Fatalf("stream holds %v, want each vote once", got)
	}
}

// TestBatcherWait: with WaitReplicas, each vote's reply carries WAIT's
// count of its pipeline; a Redis without replicas confirms on none.
func TestBatcherWait(t *testing.T) {
	t.Parallel()
	f := newBatcherFixture(t, nil, Config{WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond})
	c := f.args.call(newVoter(ledger.Principal{ID: "v"}, f.keys), "e1", f.poll, f.poll.choice([]byte("a")), time.Now(), false)
	rep := f.b.do(context.Background(), c, time.Now().Add(5*time.Second))
	if rep.err != nil || rep.waitErr != nil {
		t.Fatalf("vote with WAIT: %v, WAIT: %v", rep.err, rep.waitErr)
	}
	if res, err := decodeEnqueue(rep.res); err != nil || res.outcome != outAccepted {
		t.Fatalf("vote with WAIT: %s, %v", res.outcome, err)
	}
	if rep.replicas != 0 {
		t.Fatalf("WAIT confirmed %d replicas on a Redis without any", rep.replicas)
	}
}

// hungRedis is a client of a server that accepts connections and reads
// commands but never answers, as a hung Redis does; only deadlines end its
// calls.
func hungRedis(t testing.TB) *redis.Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The accept loop ends before conns is waited for: a conns.Go after
	// the Wait began would race with it (sync.WaitGroup's rule).
	var conns sync.WaitGroup
	accepting := make(chan struct{})
	t.Cleanup(func() {
		ln.Close()
		testenv.Receive(t, accepting, 10*time.Second, "the hung Redis' accept loop to end")
		testenv.WaitGroup(t, &conns, 10*time.Second, "the hung Redis' connections to close")
	})
	go func() {
		defer close(accepting)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Go(func() { io.Copy(io.Discard, c); c.Close() })
		}
	}()
	rdb := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), ReadTimeout: time.Minute, MaxRetries: -1,
		ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}
