package intake

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"tally/internal/testenv"
	"tally/ledger"
)

// The enqueue script deciding several votes in one call: each vote of a
// pipeline is decided in its order as if it were alone, whatever the
// others in the call did before it.

// scriptVote is one vote of an ordered batch: ballot, the principal's age
// and whether the script checks an absent record.
type scriptVote struct {
	ballot
	age   time.Duration // the principal was created that long ago
	check bool
}

// sendOrdered sends votes in one pipeline, in their order: they wait in
// pending, one after the other, while the pipeline is occupied. It returns
// each vote's reply.
func (f *batcherFixture) sendOrdered(t *testing.T, votes []scriptVote) []scriptReply {
	t.Helper()
	f.wantIdle(t)
	f.occupy(t)
	reps := make([]scriptReply, len(votes))
	var wg sync.WaitGroup
	now := time.Now()
	for i, v := range votes {
		p := newVoter(ledger.Principal{ID: v.principal, CreatedAt: now.Add(-v.age)}, f.keys)
		c := f.args.call(p, v.eventID, f.poll, f.poll.choice([]byte(v.candidate)), now, v.check)
		wg.Go(func() { reps[i] = f.b.do(context.Background(), c, now.Add(10*time.Second)) })
		f.waitPending(t, i+1)
	}
	f.release()
	testenv.WaitGroup(t, &wg, 15*time.Second, "the script's answers to the votes held in one pipeline")
	return reps
}

// outcomesOf decodes replies; an error fails the test.
func outcomesOf(t *testing.T, reps []scriptReply) []outcome {
	t.Helper()
	outs := make([]outcome, len(reps))
	for i, rep := range reps {
		if rep.err != nil {
			t.Fatalf("vote %d: %v", i, rep.err)
		}
		res, err := decodeEnqueue(rep.res)
		if err != nil {
			t.Fatalf("vote %d: %v", i, err)
		}
		outs[i] = res.outcome
	}
	return outs
}

// pipelineCounter records the commands of each pipeline a client sends.
type pipelineCounter struct {
	mu   sync.Mutex
	sent [][]string // the command names of each pipeline
}

func (*pipelineCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		names := make([]string, len(cmds))
		for i, c := range cmds {
			names[i] = c.Name()
		}
		h.mu.Lock()
		h.sent = append(h.sent, names)
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

// TestScriptOneCallPerShard: votes of several shards in one pipeline go in
// one script call per shard, and each is enqueued once on its shard.
func TestScriptOneCallPerShard(t *testing.T) {
	t.Parallel()
	f := newShardedBatcherFixture(t, nil, Config{EnqueuePipelines: 1}, 4)
	if err := enqueueScript.Load(context.Background(), f.rdb).Err(); err != nil { // no NOSCRIPT and second pipeline
		t.Fatal(err)
	}
	counter := &pipelineCounter{}
	f.rdb.AddHook(counter)
	var votes []ballot
	for _, v := range f.votesPerShard(t, "a") {
		for _, id := range []string{"e1", "e2", "e3"} {
			votes = append(votes, ballot{v.principal, id, "a"})
		}
	}
	outs, errs := f.sendHeld(t, votes)
	for i := range votes {
		if errs[i] != nil || outs[i] != outAccepted {
			t.Fatalf("vote %v: %s, %v", votes[i], outs[i], errs[i])
		}
	}
	counter.mu.Lock()
	var sent [][]string // without the client's own, on a new connection
	for _, names := range counter.sent {
		if slices.Contains(names, "evalsha") {
			sent = append(sent, names)
		}
	}
	counter.mu.Unlock()
	if len(sent) != 1 || !slices.Equal(sent[0], []string{"evalsha", "evalsha", "evalsha", "evalsha"}) {
		t.Fatalf("pipelines sent %v, want one of 4 EVALSHAs (one per shard)", sent)
	}
	for shard := range f.keys.Shards() {
		if n, err := f.rdb.XLen(context.Background(), f.keys.Stream(shard)).Result(); err != nil || n != 3 {
			t.Errorf("shard %d holds %d entries (%v), want 3", shard, n, err)
		}
	}
}

// TestScriptBatchInOrder: in one call, each vote sees what the votes
// before it did: a spent rate, a full backlog, a record written or
// deleted again, and the ledger check of an old principal.
func TestScriptBatchInOrder(t *testing.T) {
	t.Parallel()
	old := 48 * time.Hour
	for _, c := range []struct {
		name  string
		cfg   Config
		votes []scriptVote
		want  []outcome
		// entries is what the stream holds afterwards.
		entries []string
	}{
		{
			name: "rate spent midway",
			cfg:  Config{Rate: 0.001, Burst: 2},
			votes: []scriptVote{
				{ballot: ballot{"v", "e1", "a"}}, {ballot: ballot{"v", "e2", "a"}}, {ballot: ballot{"v", "e3", "a"}},
				{ballot: ballot{"w", "e1", "a"}}, {ballot: ballot{"v", "e3", "a"}}, {ballot: ballot{"v", "e1", "b"}},
			},
			want:    []outcome{outAccepted, outAccepted, outLimited, outAccepted, outLimited, outConflict},
			entries: []string{"e1", "e2", "e1"},
		},
		{
			name: "backlog full midway",
			cfg:  Config{MaxBacklog: 2},
			votes: []scriptVote{
				{ballot: ballot{"v", "e1", "a"}}, {ballot: ballot{"w", "e1", "a"}}, {ballot: ballot{"x", "e1", "a"}},
				{ballot: ballot{"v", "e1", "a"}}, {ballot: ballot{"x", "e1", "a"}},
			},
			want:    []outcome{outAccepted, outAccepted, outBacklog, outReplay, outBacklog},
			entries: []string{"e1", "e1"},
		},
		{
			name: "replay and conflict of a vote of the same call",
			votes: []scriptVote{
				{ballot: ballot{"v", "e1", "a"}}, {ballot: ballot{"v", "e1", "a"}}, {ballot: ballot{"v", "e1", "b"}},
				{ballot: ballot{"w", "e1", "b"}},
			},
			want:    []outcome{outAccepted, outReplay, outConflict, outAccepted},
			entries: []string{"e1", "e1"},
		},
		{
			name: "ledger check of an old principal",
			votes: []scriptVote{
				{ballot: ballot{"old", "e1", "a"}, age: old, check: true},
				{ballot: ballot{"young", "e1", "a"}, check: true},
				{ballot: ballot{"old", "e1", "a"}, age: old},
				{ballot: ballot{"old", "e1", "a"}, age: old, check: true},
				{ballot: ballot{"old", "e1", "b"}, age: old, check: true},
				{ballot: ballot{"old", "e2", "a"}, age: old, check: true},
			},
			want:    []outcome{outUnsure, outAccepted, outAccepted, outReplay, outConflict, outUnsure},
			entries: []string{"e1", "e1"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.cfg.EnqueuePipelines = 1
			f := newBatcherFixture(t, nil, c.cfg)
			f.markEpoch(t, time.Now().Add(-time.Hour))
			got := outcomesOf(t, f.sendOrdered(t, c.votes))
			if !slices.Equal(got, c.want) {
				t.Fatalf("outcomes %v, want %v", got, c.want)
			}
			if got := f.sizes.list(); !slices.Equal(got, []int{len(c.votes)}) {
				t.Fatalf("pipelines of %v votes, want one of %d", got, len(c.votes))
			}
			if got := f.streamIDs(t); !slices.Equal(got, c.entries) {
				t.Fatalf("stream holds %v, want %v", got, c.entries)
			}
			// A refused or unsure vote leaves no record: its event id is
			// still free.
			accepted := map[ballot]bool{}
			for i, v := range c.votes {
				if c.want[i] == outAccepted {
					accepted[ballot{v.principal, v.eventID, ""}] = true
				}
			}
			for _, v := range c.votes {
				if !accepted[ballot{v.principal, v.eventID, ""}] {
					f.wantNoRecord(t, v.principal, v.eventID)
				}
			}
		})
	}
}

// markEpoch sets the shard's epoch to at.
func (f *batcherFixture) markEpoch(t *testing.T, at time.Time) {
	t.Helper()
	if err := f.rdb.Set(context.Background(), f.keys.Epoch(0), at.UnixMicro(), 0).Err(); err != nil {
		t.Fatal(err)
	}
}

// wantNoRecord checks that the event id of principal has no idempotency
// record.
func (f *batcherFixture) wantNoRecord(t *testing.T, principal, eventID string) {
	t.Helper()
	err := f.rdb.Get(context.Background(), f.keys.Idempotency(principal, eventID)).Err()
	if !errors.Is(err, redis.Nil) {
		t.Errorf("the record of %s/%s: %v, want none", principal, eventID, err)
	}
}

// TestScriptBatchModel: random votes of a few principals on two shards,
// sent in pipelines of random sizes, are each answered as a model that
// decides one vote at a time answers: a known event id is a replay or a
// conflict, then a principal gets Burst votes, then a shard holds
// MaxBacklog entries.
func TestScriptBatchModel(t *testing.T) {
	t.Parallel()
	const burst, backlog = 2, 4
	rapid.Check(t, func(rt *rapid.T) {
		f := newShardedBatcherFixture(t, nil, Config{EnqueuePipelines: 1, Rate: 0.001, Burst: burst, MaxBacklog: backlog}, 2)
		records := map[string]string{} // principal/event id -> candidate
		spent := map[string]int{}      // principal -> accepted votes
		held := map[int]int{}          // shard -> entries
		for range rapid.IntRange(1, 4).Draw(rt, "pipelines") {
			votes := rapid.SliceOfN(rapid.Custom(func(rt *rapid.T) scriptVote {
				return scriptVote{ballot: ballot{
					principal: rapid.SampledFrom([]string{"p", "q", "r", "s"}).Draw(rt, "principal"),
					eventID:   rapid.SampledFrom([]string{"e1", "e2", "e3"}).Draw(rt, "event"),
					candidate: rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "candidate"),
				}}
			}), 1, 12).Draw(rt, "votes")
			var want []outcome
			for _, v := range votes {
				key := v.principal + "/" + v.eventID
				shard := f.keys.ShardOf(v.principal)
				switch cand, known := records[key]; {
				case known && cand == v.candidate:
					want = append(want, outReplay)
				case known:
					want = append(want, outConflict)
				case spent[v.principal] >= burst:
					want = append(want, outLimited)
				case held[shard] >= backlog:
					want = append(want, outBacklog)
				default:
					want = append(want, outAccepted)
					records[key] = v.candidate
					spent[v.principal]++
					held[shard]++
				}
			}
			got := outcomesOf(t, f.sendOrdered(t, votes))
			if !slices.Equal(got, want) {
				rt.Fatalf("votes %s: outcomes %v, want %v", describe(votes), got, want)
			}
		}
		for shard := range f.keys.Shards() {
			if n, err := f.rdb.XLen(context.Background(), f.keys.Stream(shard)).Result(); err != nil || int(n) != held[shard] {
				rt.Fatalf("shard %d holds %d entries (%v), want %d", shard, n, err, held[shard])
			}
		}
	})
}

func describe(votes []scriptVote) string {
	var b strings.Builder
	for _, v := range votes {
		fmt.Fprintf(&b, "%s/%s:%s ", v.principal, v.eventID, v.candidate)
	}
	return b.String()
}
