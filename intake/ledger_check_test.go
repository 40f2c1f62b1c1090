package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"tally/internal/apitest"
	"tally/internal/testenv"
	"tally/ledger"
	"tally/stream"
)

// The script's check of an absent idempotency record, and the collector of
// ledger lookups, against a real Redis and PostgreSQL.

// runChecked sends the vote of a principal created at createdAt through
// the batcher, with the script's check of an absent record on or off.
func (f *batcherFixture) runChecked(t *testing.T, principal string, createdAt time.Time, eventID, cand string, check bool) outcome {
	t.Helper()
	v := newVoter(ledger.Principal{ID: principal, CreatedAt: createdAt}, f.keys)
	c := f.args.call(v, eventID, f.poll, f.poll.choice([]byte(cand)), time.Now(), check)
	rep := f.b.do(context.Background(), c, time.Now().Add(5*time.Second))
	if rep.err != nil {
		t.Fatal(rep.err)
	}
	res, err := decodeEnqueue(rep.res)
	if err != nil {
		t.Fatal(err)
	}
	return res.outcome
}

// epoch reads the shard's epoch; 0 when absent.
func (f *batcherFixture) epoch(t *testing.T) int64 {
	t.Helper()
	n, err := f.rdb.Get(context.Background(), f.keys.Epoch(0)).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	return n
}

// TestScriptUnsure: the script answers unsure, changing nothing, exactly
// when the record is absent and the principal was created before
// max(now - window, epoch); the epoch is set on first use and again after
// it was lost; a known record and a vote told to skip the check are
// answered as always.
func TestScriptUnsure(t *testing.T) {
	t.Parallel()
	window := time.Hour
	f := newBatcherFixture(t, nil, Config{IdempotencyWindow: window, Rate: 1000, Burst: 1000})
	ctx := context.Background()
	before := time.Now()
	if f.epoch(t) != 0 {
		t.Fatal("a new prefix has an epoch")
	}
	// The first vote sets the epoch; a principal older than it is unsure,
	// and the script leaves neither record, entry nor rate spent.
	if got := f.runChecked(t, "old", before.Add(-time.Minute), "e1", "a", true); got != outUnsure {
		t.Fatalf("principal created before the epoch: %s, want unsure", got)
	}
	epoch := f.epoch(t)
	if epoch < before.Add(-time.Second).UnixMicro() || epoch > time.Now().Add(time.Second).UnixMicro() {
		t.Fatalf("epoch %d is not the time of the first vote (%d)", epoch, before.UnixMicro())
	}
	for _, k := range []string{f.keys.Idempotency("old", "e1"), f.keys.RateLimit("old"), f.keys.Stream(0)} {
		if n := f.rdb.Exists(ctx, k).Val(); n != 0 {
			t.Fatalf("an unsure answer left %s", k)
		}
	}
	// Told the ledger does not hold it, the vote is enqueued; its retry is
	// a replay from the record, whatever the principal's age.
	if got := f.runChecked(t, "old", before.Add(-time.Minute), "e1", "a", false); got != outAccepted {
		t.Fatalf("vote with the check skipped: %s, want accepted", got)
	}
	if got := f.runChecked(t, "old", before.Add(-time.Minute), "e1", "a", true); got != outReplay {
		t.Fatalf("retry of an enqueued vote: %s, want replay", got)
	}
	if got := f.runChecked(t, "old", before.Add(-time.Minute), "e1", "b", true); got != outConflict {
		t.Fatalf("reuse of an enqueued vote's id: %s, want conflict", got)
	}
	// A principal created at or after the epoch is not checked.
	young := time.UnixMicro(epoch)
	if got := f.runChecked(t, "young", young, "e1", "a", true); got != outAccepted {
		t.Fatalf("principal created at the epoch: %s, want accepted", got)
	}
	// Past the window, the window is the cutoff.
	if err := f.rdb.Set(ctx, f.keys.Epoch(0), time.Now().Add(-3*window).UnixMicro(), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got := f.runChecked(t, "older", time.Now().Add(-window-time.Minute), "e1", "a", true); got != outUnsure {
		t.Fatalf("principal older than the window: %s, want unsure", got)
	}
	if got := f.runChecked(t, "recent", time.Now().Add(-window+time.Minute), "e1", "a", true); got != outAccepted {
		t.Fatalf("principal younger than the window: %s, want accepted", got)
	}
	// The epoch lost with Redis' data: set again at the next vote, and a
	// principal created before that is checked.
	if err := f.rdb.Del(ctx, f.keys.Epoch(0)).Err(); err != nil {
		t.Fatal(err)
	}
	if got := f.runChecked(t, "recent", time.Now().Add(-window+time.Minute), "e2", "a", true); got != outUnsure {
		t.Fatalf("after the epoch was lost: %s, want unsure", got)
	}
	if f.epoch(t) <= epoch {
		t.Fatalf("epoch %d not set again after it was lost (was %d)", f.epoch(t), epoch)
	}
	if ids := f.streamIDs(t); len(ids) != 3 {
		t.Fatalf("stream holds %v, want the three accepted votes", ids)
	}
}

// countingStore is a store whose pool counts the queries it runs.
func countingStore(t *testing.T) (*ledger.Store, *pgxpool.Pool, *atomic.Int64) {
	t.Helper()
	db := testenv.Postgres(t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	var queries atomic.Int64
	cfg.ConnConfig.Tracer = queryCounter{&queries}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store, err := ledger.New(pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return store, pool, &queries
}

type queryCounter struct{ n *atomic.Int64 }

func (q queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	q.n.Add(1)
	return ctx
}

func (queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestLedgerChecksShareQueries: lookups that wait while the query slots
// are taken go in one query, and each gets its own answer.
func TestLedgerChecksShareQueries(t *testing.T) {
	t.Parallel()
	store, _, queries := countingStore(t)
	ctx := context.Background()
	if err := store.CreatePoll(ctx, ledger.Poll{ID: "p", Title: "p", Choices: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, []ledger.Event{
		{PrincipalID: "alice", ClientEventID: "e3", PollID: "p", CandidateID: "a", ReceivedAt: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	l := newLedgerChecks(store, Config{}.withDefaults(), slog.New(slog.DiscardHandler))
	l.mu.Lock()
	l.leaders = checkQueries // every slot taken: lookups wait in pending
	l.mu.Unlock()
	const n = 50
	replies := make([]checkReply, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			replies[i] = l.do(ctx, ledger.EventKey{PrincipalID: "alice", ClientEventID: "e" + strconv.Itoa(i)}, time.Now().Add(5*time.Second))
		})
	}
	testenv.Eventually(t, 5*time.Second, fmt.Sprintf("%d lookups pending", n), func() error {
		l.mu.Lock()
		waiting := len(l.pending)
		l.mu.Unlock()
		if waiting != n {
			return fmt.Errorf("%d pending", waiting)
		}
		return nil
	})
	before := queries.Load()
	for range checkQueries {
		go l.lead(ctx, nil)
	}
	testenv.WaitGroup(t, &wg, 15*time.Second, "the pending lookups' answers")
	if got := queries.Load() - before; got != 1 {
		t.Fatalf("%d lookups took %d queries, want 1", n, got)
	}
	for i, r := range replies {
		if r.err != nil || r.found != (i == 3) {
			t.Fatalf("lookup e%d: found %v, %v; only e3 is in the ledger", i, r.found, r.err)
		}
	}
	if replies[3].rec.Status != ledger.StatusRecorded || replies[3].rec.CandidateID != "a" {
		t.Fatalf("e3: %+v, want recorded a", replies[3].rec)
	}
	wantChecksIdle(t, l)
}

// wantChecksIdle checks that within a few seconds no lookup waits and no
// leader is left.
func wantChecksIdle(t *testing.T, l *ledgerChecks) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, "the ledger checks to be idle", func() error {
		l.mu.Lock()
		leaders, pending := l.leaders, len(l.pending)
		l.mu.Unlock()
		if leaders != 0 || pending != 0 {
			return fmt.Errorf("%d leaders, %d lookups left", leaders, pending)
		}
		return nil
	})
}

// TestLedgerChecksFail: a ledger that does not answer, or a deadline
// already past, answers every lookup an error, and no leader is left.
func TestLedgerChecksFail(t *testing.T) {
	t.Parallel()
	store, pool, _ := countingStore(t)
	ctx := context.Background()
	l := newLedgerChecks(store, Config{}.withDefaults(), slog.New(slog.DiscardHandler))
	key := ledger.EventKey{PrincipalID: "alice", ClientEventID: "e1"}
	if r := l.do(ctx, key, time.Now().Add(-time.Millisecond)); !errors.Is(r.err, context.DeadlineExceeded) {
		t.Fatalf("lookup past its deadline: %+v", r)
	}
	pool.Close()
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			if r := l.do(ctx, key, time.Now().Add(5*time.Second)); r.err == nil || r.found {
				t.Errorf("lookup on a closed pool: %+v", r)
			}
		})
	}
	testenv.WaitGroup(t, &wg, 15*time.Second, "the answers of lookups on a closed pool")
	wantChecksIdle(t, l)
}

// TestCheckLedgerOutOfTime: a check the request's deadline cut short
// answers 503 not-queued, saying that a retry with the same event id is
// safe; the vote is not enqueued.
func TestCheckLedgerOutOfTime(t *testing.T) {
	t.Parallel()
	store, _, _ := countingStore(t)
	f := newBatcherFixture(t, nil, Config{})
	s, err := New(Config{}, store, f.rdb, f.keys, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	v := newVoter(ledger.Principal{ID: "alice"}, f.keys)
	res, known := s.checkLedger(context.Background(), v, "e1", f.poll, f.poll.choice([]byte("a")), time.Now().Add(-time.Millisecond))
	if !known || res.outcome != outUnchecked {
		t.Fatalf("check past the deadline: %s (known %v), want unchecked", res.outcome, known)
	}
	w := httptest.NewRecorder()
	s.answerEnqueue(w, httptest.NewRequest(http.MethodPost, "/v1/votes", nil), &voteBody{eventID: "e1"}, res, nil)
	body := w.Body.String()
	api, err := apitest.Load(openAPIDocument)
	if err != nil {
		t.Fatal(err)
	}
	if err := api.CheckAnswer(http.MethodPost, routeVotes, w.Code, w.Header(), w.Body.Bytes()); err != nil {
		t.Errorf("OpenAPI contract: %v", err)
	}
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(body, "urn:tally:problem:not-queued") ||
		!strings.Contains(body, "same event_id") || w.Header().Get("Retry-After") == "" {
		t.Fatalf("answer %d %v: %s", w.Code, w.Header(), body)
	}
	if got := testutil.ToFloat64(s.metrics.ledgerChecks[checkError]); got != 1 {
		t.Fatalf("ledger checks counted as errors: %g, want 1", got)
	}
}

// enqueueModel is what the idempotency rules say a vote gets, written from
// the rules rather than from the script: an event id a principal used is
// known, with its payload, until Redis loses the entry that holds it
// before it reached the ledger; a known id answers replay (same payload)
// or conflict, an unknown one is accepted.
type enqueueModel struct {
	known    map[ledger.EventKey]string // payload, "poll candidate"
	inLedger map[ledger.EventKey]ledger.Status
	record   map[ledger.EventKey]bool // its Redis record is there
}

func (m *enqueueModel) want(k ledger.EventKey, payload string) outcome {
	switch known, ok := m.known[k]; {
	case !ok:
		return outAccepted
	case known == payload:
		return outReplay
	}
	return outConflict
}

// modelVoter is a principal of the property test: old ones were created
// before the idempotency window, young ones when the test made them.
type modelVoter struct {
	v   *voter
	old bool
}

// TestEnqueueModel checks enqueue against enqueueModel through random
// runs of votes, projection into the ledger, expiry of the records of old
// principals' recorded events (a young principal's records cannot have
// expired yet), and loss of all of Redis' data (records, streams and
// epoch, as a restart without persistence), with principals created
// between them. Whatever Redis forgot, every vote gets the model's answer,
// and a replay answered from the ledger states the ledger's status.
func TestEnqueueModel(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := store.CreatePoll(ctx, ledger.Poll{ID: "p", Title: "p", OpensAt: time.Unix(0, 0), Choices: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	poll := newPollInfo(ledger.Poll{ID: "p", Choices: []string{"a", "b"}}, time.Now())
	rdb, prefix := testenv.Redis(t)
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		keys, err := stream.NewKeys(fmt.Sprintf("%s_%d", prefix, run), 1)
		if err != nil {
			rt.Fatal(err)
		}
		forget := func() { dropKeys(rt, rdb, keys) }
		defer forget()
		s, err := New(Config{Rate: 1e6, Burst: 1_000_000, IdempotencyWindow: time.Hour, LedgerCheck: true}, store, rdb, keys, nil, nil)
		if err != nil {
			rt.Fatal(err)
		}
		// A Redis that has held records for three hours: a principal
		// created two hours ago has all its records but the expired ones.
		if err := rdb.Set(ctx, keys.Epoch(0), time.Now().Add(-3*time.Hour).UnixMicro(), 0).Err(); err != nil {
			rt.Fatal(err)
		}
		m := &enqueueModel{known: map[ledger.EventKey]string{}, inLedger: map[ledger.EventKey]ledger.Status{}, record: map[ledger.EventKey]bool{}}
		voters := []modelVoter{newModelVoter(run, 0, rapid.Bool().Draw(rt, "old"), keys)}
		actions := map[string]func(*rapid.T){
			"principal": func(rt *rapid.T) {
				voters = append(voters, newModelVoter(run, len(voters), rapid.Bool().Draw(rt, "old"), keys))
			},
			"vote": func(rt *rapid.T) {
				mv := rapid.SampledFrom(voters).Draw(rt, "voter")
				id := fmt.Sprintf("e%d", rapid.IntRange(0, 3).Draw(rt, "event"))
				cand := rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "candidate")
				k := ledger.EventKey{PrincipalID: mv.v.ID, ClientEventID: id}
				want := m.want(k, "p "+cand)
				res, err := s.enqueue(ctx, mv.v, id, poll, poll.choice([]byte(cand)), time.Now(), time.Now().Add(5*time.Second))
				if err != nil || res.outcome != want {
					rt.Fatalf("vote %v %s (old %v): %s, %v; want %s", k, cand, mv.old, res.outcome, err, want)
				}
				if want == outReplay && !m.record[k] && res.status != m.inLedger[k] {
					rt.Fatalf("replay of %v from the ledger states %q, the ledger holds %q", k, res.status, m.inLedger[k])
				}
				if want == outAccepted {
					m.known[k], m.record[k] = "p "+cand, true
				}
			},
			"project": func(rt *rapid.T) { projectAll(rt, store, rdb, keys, m) },
			"expire": func(rt *rapid.T) {
				var expirable []ledger.EventKey
				for _, mv := range voters {
					for k := range m.inLedger {
						if mv.old && k.PrincipalID == mv.v.ID && m.record[k] {
							expirable = append(expirable, k)
						}
					}
				}
				if len(expirable) == 0 {
					return // no record of an old principal's recorded event
				}
				slices.SortFunc(expirable, func(a, b ledger.EventKey) int {
					return strings.Compare(a.PrincipalID+a.ClientEventID, b.PrincipalID+b.ClientEventID)
				})
				k := rapid.SampledFrom(expirable).Draw(rt, "record")
				if err := rdb.Del(ctx, keys.Idempotency(k.PrincipalID, k.ClientEventID)).Err(); err != nil {
					rt.Fatal(err)
				}
				m.record[k] = false
			},
			"lose": func(rt *rapid.T) {
				forget()
				for k := range m.known {
					if _, ok := m.inLedger[k]; !ok {
						delete(m.known, k) // its entry is gone with the stream
					}
				}
				clear(m.record)
			},
		}
		// Mostly votes; enough projections and expiries that votes meet
		// records gone.
		weighted := []string{"vote", "vote", "vote", "vote", "project", "project", "expire", "expire", "principal", "lose"}
		for range rapid.IntRange(1, 60).Draw(rt, "steps") {
			actions[rapid.SampledFrom(weighted).Draw(rt, "action")](rt)
		}
	})
}

// newModelVoter makes principal n of run, created now or two windows (two
// hours) ago.
func newModelVoter(run, n int, old bool, keys stream.Keys) modelVoter {
	created := time.Now()
	if old {
		created = created.Add(-2 * time.Hour)
	}
	return modelVoter{v: newVoter(ledger.Principal{ID: fmt.Sprintf("r%d-v%d", run, n), CreatedAt: created}, keys), old: old}
}

// projectAll applies every entry of the stream to the ledger and deletes
// it, as the projector does, and tells m what the ledger made of each.
func projectAll(rt *rapid.T, store *ledger.Store, rdb redis.UniversalClient, keys stream.Keys, m *enqueueModel) {
	ctx := context.Background()
	msgs, err := rdb.XRange(ctx, keys.Stream(0), "-", "+").Result()
	if err != nil {
		rt.Fatal(err)
	}
	if len(msgs) == 0 {
		return
	}
	events := make([]ledger.Event, len(msgs))
	ids := make([]string, len(msgs))
	for i, msg := range msgs {
		e, err := stream.Decode(msg.Values)
		if err != nil {
			rt.Fatal(err)
		}
		events[i] = ledger.Event{PrincipalID: e.PrincipalID, ClientEventID: e.ClientEventID, PollID: e.PollID, CandidateID: e.CandidateID, ReceivedAt: e.ReceivedAt}
		ids[i] = msg.ID
	}
	outs, err := store.Append(ctx, events)
	if err != nil {
		rt.Fatal(err)
	}
	for i, e := range events {
		k := ledger.EventKey{PrincipalID: e.PrincipalID, ClientEventID: e.ClientEventID}
		if outs[i].Status == ledger.StatusDuplicate {
			rt.Fatalf("%v reached the ledger twice", k)
		}
		m.inLedger[k] = outs[i].Status
	}
	if err := rdb.XDel(ctx, keys.Stream(0), ids...).Err(); err != nil {
		rt.Fatal(err)
	}
}

// dropKeys deletes every key of keys' shard, as a Redis that lost its data.
func dropKeys(t interface{ Fatal(...any) }, rdb redis.UniversalClient, keys stream.Keys) {
	ctx := context.Background()
	tag := keys.Stream(0)[:strings.IndexByte(keys.Stream(0), '}')+1]
	var found []string
	iter := rdb.Scan(ctx, 0, tag+"*", 1000).Iterator()
	for iter.Next(ctx) {
		found = append(found, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if len(found) > 0 {
		if err := rdb.Del(ctx, found...).Err(); err != nil {
			t.Fatal(err)
		}
	}
}
