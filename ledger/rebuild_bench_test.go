package ledger_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"tally/internal/testenv"
	"tally/ledger"
	"tally/vote"
)

// processCPU is the CPU time the process has used, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// backendCPU is the CPU time each client backend of pool's database has
// used so far, by pid, read from /proc/PID/schedstat; nil when
// PostgreSQL's processes cannot be read there (a server on another
// machine). The database is the benchmark's own, so its backends are the
// rebuild's and the plain aggregate's (a parallel worker, gone by the
// time it is read, is not counted).
func backendCPU(b *testing.B, pool *pgxpool.Pool) map[int32]time.Duration {
	rows, err := pool.Query(context.Background(), `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'`)
	if err != nil {
		b.Fatal(err)
	}
	out := map[int32]time.Duration{}
	for rows.Next() {
		var pid int32
		if err := rows.Scan(&pid); err != nil {
			b.Fatal(err)
		}
		s, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
		if err != nil {
			rows.Close()
			return nil
		}
		ns, err := strconv.ParseInt(strings.Fields(string(s))[0], 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		out[pid] = time.Duration(ns)
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	return out
}

// BenchmarkRebuildRanked rebuilds a ledger of 100,000 ranked ballots (10
// polls of 4 choices, each ballot ranking the 4, appended by Store.Append)
// and reports, besides the time of a rebuild and the CPU time the process
// spent in it (rebuild-cpu-ms: the client's; backend-cpu-ms: its
// PostgreSQL backends', when they can be read),
// the time of the plain aggregate bench's RKG measures over the same
// table, run in the same iteration, and their ratio (rebuild/plain): RK /
// RKG of a smaller ledger, to profile rebuild with -cpuprofile.
func BenchmarkRebuildRanked(b *testing.B) {
	choices := []string{"a", "b", "c", "d"}
	benchRebuild(b, vote.Spec{Kind: "ranked"}, `SELECT poll_id, ballot, count(*) FROM poll_events GROUP BY poll_id, ballot`, func(n int) string {
		r := n % 4
		return vote.Ballot{Kind: vote.KindRanked, Choices: append(append([]string{}, choices[r:]...), choices[:r]...)}.Canonical()
	})
}

// BenchmarkRebuild is BenchmarkRebuildRanked of single choices (R / RG of
// a smaller ledger), against RG's plain count.
func BenchmarkRebuild(b *testing.B) {
	benchRebuild(b, vote.Spec{}, `SELECT poll_id, candidate_id, count(*) FROM poll_events GROUP BY poll_id, candidate_id`, func(n int) string {
		return []string{"a", "b", "c", "d"}[n%4]
	})
}

// benchRebuild fills a ledger of 100,000 answers of spec over 10 polls of
// 4 choices, answer(n) the n-th, and times Rebuild against plain.
func benchRebuild(b *testing.B, spec vote.Spec, plain string, answer func(n int) string) {
	ctx := context.Background()
	db := testenv.Postgres(b)
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		b.Fatal(err)
	}
	choices := []string{"a", "b", "c", "d"}
	rules, err := vote.NewRules(spec, len(choices))
	if err != nil {
		b.Fatal(err)
	}
	for p := range 10 {
		if err := store.CreatePoll(ctx, ledger.Poll{ID: fmt.Sprintf("poll%d", p), Title: "bench", OpensAt: time.Unix(0, 0), Choices: choices, Rules: rules}); err != nil {
			b.Fatal(err)
		}
	}
	const events = 100_000
	batch := make([]ledger.Event, 1000)
	for n := 0; n < events; {
		now := time.Now()
		for j := range batch {
			batch[j] = ledger.EventOf(fmt.Sprintf("u%d", n), "k1", fmt.Sprintf("poll%d", n%10), answer(n), now)
			n++
		}
		if _, err := store.Append(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	var rebuild, plainTime, cpu, backend time.Duration
	backendRead := true
	b.ResetTimer()
	for range b.N {
		b0 := backendCPU(b, db.Pool)
		t0, c0 := time.Now(), processCPU(b)
		rep, err := store.Rebuild(ctx, "")
		if err != nil {
			b.Fatal(err)
		}
		if rep.Differing != 0 || rep.LogProblems != 0 || rep.LedgerEvents != events {
			b.Fatalf("rebuild: %d figures differ, %d logs do not verify, %d events (want %d)", rep.Differing, rep.LogProblems, rep.LedgerEvents, events)
		}
		rebuild += time.Since(t0)
		cpu += processCPU(b) - c0
		b1 := backendCPU(b, db.Pool)
		backendRead = backendRead && b0 != nil && b1 != nil
		for pid, d := range b1 {
			backend += d - b0[pid]
		}
		t0 = time.Now()
		rows, err := db.Pool.Query(ctx, plain)
		if err != nil {
			b.Fatal(err)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			b.Fatal(err)
		}
		plainTime += time.Since(t0)
	}
	b.ReportMetric(float64(rebuild.Milliseconds())/float64(b.N), "rebuild-ms")
	b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "rebuild-cpu-ms")
	if backendRead {
		b.ReportMetric(float64(backend.Milliseconds())/float64(b.N), "backend-cpu-ms")
	}
	b.ReportMetric(float64(plainTime.Milliseconds())/float64(b.N), "plain-ms")
	b.ReportMetric(rebuild.Seconds()/plainTime.Seconds(), "rebuild/plain")
}

// BenchmarkRebuildManyPolls rebuilds a ledger of many small polls (3,000
// polls of 2 choices, 3 votes each, appended by Store.Append) and reports
// what a rebuild allocates (-benchmem: B/op) beside its time: the pass
// holds a batch and a hasher for each poll it has begun, so what they
// take must follow the polls' rows, not a fixed size a poll. Under -short
// (make test), 300 polls.
func BenchmarkRebuildManyPolls(b *testing.B) {
	polls, votes := shortOr(3000, 300), 3
	store := smallPollsLedger(b, polls, votes)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		rebuildFinds(b, store, "", polls*votes)
	}
}

// BenchmarkRebuildOnePoll rebuilds one poll of a ledger of 200 (1,000
// single choices each, 200,000 rows, appended by Store.Append), as tally
// rebuild --poll does: what it reads must follow the poll's rows, not the
// ledger's. Under -short (make test), 100 votes a poll.
func BenchmarkRebuildOnePoll(b *testing.B) {
	votes := shortOr(1000, 100)
	store := smallPollsLedger(b, 200, votes)
	b.ResetTimer()
	for range b.N {
		rebuildFinds(b, store, "poll7", votes)
	}
}

// smallPollsLedger is a Store on a ledger of polls single-choice polls
// (poll0, poll1, ...) of 2 choices, votes votes each, appended by
// Store.Append in batches of 1,000 and analyzed.
func smallPollsLedger(b *testing.B, polls, votes int) *ledger.Store {
	ctx := context.Background()
	db := testenv.Postgres(b)
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		b.Fatal(err)
	}
	ps := make([]ledger.Poll, polls)
	for p := range ps {
		ps[p] = ledger.Poll{ID: fmt.Sprintf("poll%d", p), Title: "bench", OpensAt: time.Unix(0, 0), Choices: []string{"a", "b"}}
	}
	for i := 0; i < polls; i += 500 {
		if _, err := store.EnsurePolls(ctx, ps[i:min(i+500, polls)]); err != nil {
			b.Fatal(err)
		}
	}
	events := make([]ledger.Event, polls*votes)
	for n := range events {
		events[n] = ledger.EventOf(fmt.Sprintf("u%d", n), "k", fmt.Sprintf("poll%d", n%polls), "a", time.Now())
	}
	for batch := range slices.Chunk(events, 1000) {
		if _, err := store.Append(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := db.Pool.Exec(ctx, `VACUUM ANALYZE poll_events`); err != nil {
		b.Fatal(err)
	}
	return store
}

// rebuildFinds rebuilds pollID (every poll when empty) and fails b unless
// it finds events rows and nothing wrong.
func rebuildFinds(b *testing.B, store *ledger.Store, pollID string, events int) {
	rep, err := store.Rebuild(context.Background(), pollID)
	if err != nil {
		b.Fatal(err)
	}
	if rep.Differing != 0 || rep.LogProblems != 0 || rep.LedgerEvents != int64(events) {
		b.Fatalf("rebuild: %d figures differ, %d logs do not verify, %d events (want %d)", rep.Differing, rep.LogProblems, rep.LedgerEvents, events)
	}
}

// shortOr is full, or short under -short.
func shortOr(full, short int) int {
	if testing.Short() {
		return short
	}
	return full
}
