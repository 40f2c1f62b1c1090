package chaos_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"tally/internal/chaos"
	"tally/internal/loadtest"
	"tally/internal/pause"
	"tally/internal/testenv"
	"tally/projector"
	"tally/stream"
)

// tallyBin is the tally binary TestMain built.
var tallyBin string

// profile is how hard the suite pushes: the short one runs with every
// `go test`, the long one with TALLY_CHAOS=long.
type profile struct {
	name           string
	rate           float64 // votes per second the loadtest sends
	projectorKills int
	intakeKills    int
	redisRestarts  int
	pgRestarts     int
	netCycles      int           // each: latency, then two cuts and two resets
	backlogOutages int           // both projectors down until the backlog is full
	poison         int           // entries written that must be dead-lettered
	pgOutages      int           // the projectors cut from PostgreSQL ...
	pgOutage       time.Duration // ... for this long each time
	overlapKills   int           // projector kills while entries are claimed from live projectors
}

var (
	shortProfile = profile{name: "short", rate: 300, projectorKills: 3, intakeKills: 2, redisRestarts: 1, pgRestarts: 1, netCycles: 1, backlogOutages: 1, poison: 4, pgOutages: 1, pgOutage: 8 * time.Second, overlapKills: 2}
	longProfile  = profile{name: "long", rate: 1500, projectorKills: 40, intakeKills: 16, redisRestarts: 8, pgRestarts: 8, netCycles: 4, backlogOutages: 3, poison: 20, pgOutages: 2, pgOutage: 30 * time.Second, overlapKills: 10}
	prof         = shortProfile
)

func TestMain(m *testing.M) {
	if os.Getenv("TALLY_CHAOS") == "long" {
		prof = longProfile
	}
	if r := os.Getenv("TALLY_CHAOS_RATE"); r != "" {
		v, err := strconv.ParseFloat(r, 64)
		if err != nil || v <= 0 {
			fmt.Fprintf(os.Stderr, "chaos: TALLY_CHAOS_RATE=%q: want votes per second above 0\n", r)
			os.Exit(2)
		}
		prof.rate = v
	}
	testenv.QuietRedis()
	dir, err := os.MkdirTemp("", "tally-chaos-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	tallyBin, err = chaos.Build(ctx, dir)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos: build the tally binary:", err)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	code := m.Run()
	testenv.DropTemplate()
	printTable(os.Stdout)
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is one row of the table.
type result struct {
	scenario    string
	faults      string
	accepted    int64
	lost        int64
	twice       int64
	drain       time.Duration // after the last fault ended
	finalDrain  time.Duration // after sending stopped
	deadLetters int
	passed      bool
}

var (
	resultsMu sync.Mutex
	results   []result
)

func record(r result) {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	results = append(results, r)
}

func printTable(w io.Writer) {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	if len(results) == 0 {
		return
	}
	fmt.Fprintf(w, "\nchaos (%s profile, %s)\n", prof.name, time.Now().UTC().Format("2006-01-02 15:04 MST"))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tFAULTS\tACCEPTED\tLOST\tCOUNTED TWICE\tDEAD LETTERS\tDRAIN AFTER LAST FAULT\tDRAIN AFTER SEND\tVERDICT")
	var faults, accepted, lost, twice int64
	for _, r := range results {
		verdict := "pass"
		if !r.passed {
			verdict = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", r.scenario, r.faults, r.accepted, r.lost, r.twice, r.deadLetters,
			r.drain.Round(10*time.Millisecond), r.finalDrain.Round(10*time.Millisecond), verdict)
		var n int64
		fmt.Sscanf(r.faults, "%d", &n)
		faults += n
		accepted += r.accepted
		lost += r.lost
		twice += r.twice
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t%d\t%d\t\t\t\t\n", faults, accepted, lost, twice)
	tw.Flush()
}

// between returns a random duration in [lo, hi).
func between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rand.Int64N(int64(hi-lo)))
}

// injector injects a scenario's faults while the votes are sent. It calls
// ending as it starts to undo each fault (restarts the process, restores
// the link); the last call marks the end of the last fault. It returns the
// number of faults and a description once the last fault is undone.
type injector func(ctx context.Context, ending func()) (n int, what string, err error)

// run sends votes for sendFor while inject runs, then drains, verifies
// and records the scenario's row. No dead letter is expected.
func run(t *testing.T, c *cluster, scenario string, sendFor time.Duration, inject injector) {
	t.Helper()
	runWith(t, c, scenario, sendFor, inject, nil)
}

// runWith is run for a scenario that writes poison entries: deadLetters
// returns, once sending is over, the stream ids that must end
// dead-lettered (and no other).
func runWith(t *testing.T, c *cluster, scenario string, sendFor time.Duration, inject injector, deadLetters func() map[string]projector.Reason) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sendFor+5*time.Minute)
	defer cancel()
	s, err := loadtest.New(loadConfig(t, c, scenario, sendFor), loadtest.Deps{Store: c.store, Queue: loadtest.RedisQueue(c.rdb, c.keys), Key: &c.key})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.WithoutCancel(ctx))

	done := make(chan faultOutcome, 1)
	go func() { done <- injectWhileSending(ctx, c, s, inject) }()
	sendErr := s.Send(ctx)
	fo := <-done
	if sendErr != nil {
		t.Fatalf("send: %v", sendErr)
	}
	if fo.err != nil {
		t.Fatalf("inject faults: %v", fo.err)
	}
	drainErr := s.Drain(ctx)
	rep, err := s.Verify(ctx)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	res := result{
		scenario: scenario, faults: fmt.Sprintf("%d %s", fo.n, fo.what),
		accepted: rep.AcceptedEvents, lost: rep.Lost, twice: rep.CountedTwice,
		drain: fo.drain, finalDrain: rep.DrainDuration, passed: true,
	}
	fail := func(format string, args ...any) {
		t.Helper()
		res.passed = false
		t.Errorf(format, args...)
	}
	if drainErr != nil {
		fail("drain: %v", drainErr)
	}
	if fo.derr != nil {
		fail("drain after the last fault: %v", fo.derr)
	}
	if c.lossExpected {
		rep = excuseLoss(t, scenario, rep)
	}
	checkReport(rep, fail)
	checkQueueEmpty(ctx, c, fail)
	var want map[string]projector.Reason
	if deadLetters != nil {
		want = deadLetters()
	}
	res.deadLetters = checkDeadLetters(ctx, c, want, fail)
	c.checkAlive()
	claimed, duplicates := c.projectorCounters(ctx)
	t.Logf("%s: the live projectors counted, since their last start, %.0f entries claimed and %.0f duplicates absorbed", scenario, claimed, duplicates)
	record(res)
	t.Logf("%s: %s; accepted %d events (%d votes, %d requests, %d uncertain), retried %v, recorded %d, rejected %v, lost %d, counted twice %d, reordered %d; drain after the last fault %s, after sending %s",
		scenario, res.faults, rep.AcceptedEvents, rep.Accepted, rep.Requests, rep.Uncertain, rep.Retried, rep.Recorded, rep.Rejected,
		rep.Lost, rep.CountedTwice, rep.Reordered, fo.drain.Round(time.Millisecond), rep.DrainDuration.Round(time.Millisecond))
}

// loadConfig is the load every scenario sends: every kind of vote, with
// retries patient enough to outlast a fault.
func loadConfig(t *testing.T, c *cluster, scenario string, sendFor time.Duration) loadtest.Config {
	level := slog.LevelError
	if os.Getenv("TALLY_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	cfg := loadtest.Config{
		Targets:             c.intakeURLs(),
		Duration:            sendFor,
		Rate:                prof.rate,
		Concurrency:         16,
		Principals:          300,
		PollChoices:         4,
		RetryShare:          0.1,
		KeyReuseShare:       0.05,
		SecondResponseShare: 0.1,
		AllowReorder:        true, // a claim after a kill may apply a principal's second response first
		DrainTimeout:        2 * time.Minute,
		RequestTimeout:      5 * time.Second,
		MaxAttempts:         200,
		BackoffMin:          50 * time.Millisecond,
		BackoffMax:          500 * time.Millisecond,
		MaxRetryAfter:       time.Second,
		Logger:              slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: level})),
	}
	if testing.Verbose() && prof.name == "long" {
		cfg.ProgressEvery = 5 * time.Second
		cfg.Progress = func(p loadtest.Progress) {
			q := ""
			if p.Queue != nil {
				q = fmt.Sprintf(" backlog %d pending %d", p.Queue.Backlog, p.Queue.Pending)
			}
			t.Logf("%s: %s %s accepted %d requests %d%s", scenario, p.Phase, p.Elapsed.Round(time.Second), p.Accepted, p.Requests, q)
		}
	}
	return cfg
}

// faultOutcome is what injectWhileSending saw: the faults, and the time
// to drain after the last one.
type faultOutcome struct {
	n     int
	what  string
	err   error
	drain time.Duration
	derr  error
}

// injectWhileSending waits until votes flow, runs inject, then marks the
// backlog the last fault left and times its drain.
func injectWhileSending(ctx context.Context, c *cluster, s *loadtest.Session, inject injector) faultOutcome {
	var out faultOutcome
	// Faults start once votes flow.
	for i := 0; i < 200 && s.Progress().Accepted < 200; i++ {
		if !pause.For(ctx, 50*time.Millisecond) {
			break
		}
	}
	var end time.Time
	out.n, out.what, out.err = inject(ctx, func() { end = time.Now() })
	if out.err != nil {
		return out
	}
	if end.IsZero() {
		end = time.Now()
	}
	var mark chaos.Mark
	for range 100 { // Redis may still be loading its file
		qctx, qcancel := context.WithTimeout(ctx, time.Second)
		mark, out.derr = chaos.MarkBacklog(qctx, c.rdb, c.keys)
		qcancel()
		if out.derr == nil || !pause.For(ctx, 100*time.Millisecond) {
			break
		}
	}
	if out.derr == nil {
		out.drain, out.derr = mark.WaitDrained(ctx, c.rdb, end, 3*time.Minute)
	}
	return out
}

// checkReport fails the scenario on any broken invariant the loadtest's
// verification found, and when it tested nothing.
func checkReport(rep loadtest.Report, fail func(string, ...any)) {
	if !rep.Passed() {
		fail("verification failed (lost %d, counted twice %d):\n%s", rep.Lost, rep.CountedTwice, strings.Join(rep.Failures(), "\n"))
	}
	if rep.Lost != 0 || rep.CountedTwice != 0 {
		fail("lost %d, counted twice %d: both must be 0", rep.Lost, rep.CountedTwice)
	}
	if !rep.Drained {
		fail("the queue did not drain within the drain timeout")
	}
	if rep.AcceptedEvents == 0 {
		fail("no vote was accepted: the scenario tested nothing")
	}
}

// checkQueueEmpty fails the scenario when the streams hold a backlog or
// pending entries after the drain.
func checkQueueEmpty(ctx context.Context, c *cluster, fail func(string, ...any)) {
	st, err := projector.Inspect(ctx, c.rdb, c.keys)
	if err != nil {
		fail("inspect the queue: %v", err)
	} else if st.Total.Backlog != 0 || st.Total.Pending != 0 {
		fail("after the drain the queue holds backlog %d, pending %d; want 0 and 0", st.Total.Backlog, st.Total.Pending)
	}
}

// checkDeadLetters fails the scenario unless the dead letters are exactly
// want (stream id -> the reason it must be dead-lettered for), and returns
// how many there are.
func checkDeadLetters(ctx context.Context, c *cluster, want map[string]projector.Reason, fail func(string, ...any)) int {
	ds, err := projector.NewDeadLetters(c.rdb, c.keys).List(ctx, 0)
	if err != nil {
		fail("list the dead letters: %v", err)
		return 0
	}
	var unexpected []string
	seen := map[string]bool{}
	for _, d := range ds {
		reason, ok := want[d.StreamID]
		if !ok || reason != d.Reason || seen[d.StreamID] {
			unexpected = append(unexpected, fmt.Sprintf("%s from %s/%s reason %q error %q deliveries %d fields %v",
				d.Ref(), d.Stream, d.StreamID, d.Reason, d.Error, d.Deliveries, d.Fields))
		}
		seen[d.StreamID] = true
	}
	if len(unexpected) > 0 {
		fail("%d dead letters nobody accounts for:\n%s", len(unexpected), strings.Join(unexpected, "\n"))
	}
	for id, reason := range want {
		if !seen[id] {
			fail("poison entry %s was not dead-lettered (want reason %q)", id, reason)
		}
	}
	return len(ds)
}

// scenario starts a scenario's test. In the short profile the scenarios
// run side by side (as many at once as go test's -parallel, GOMAXPROCS by
// default), each in its own world of servers and daemons, so the suite
// costs its longest scenarios rather than their sum; the long profile,
// at five times the rate, runs them one at a time.
func scenario(t *testing.T) {
	if prof.name == "short" {
		t.Parallel()
	}
}

// setConsumer gives a stopped projector another consumer name.
func setConsumer(p *chaos.Process, name string) {
	for i, a := range p.Args {
		if a == "--consumer" {
			p.Args[i+1] = name
		}
	}
}

// kill -9 one of two projectors at random moments, restart it each time;
// the survivor or the restarted one claims what the dead one held.
func TestProjectorKill(t *testing.T) {
	scenario(t)
	c := newCluster(t, clusterOptions{intakes: 1, projectors: 2})
	kills := prof.projectorKills
	window := time.Duration(kills) * 1500 * time.Millisecond
	run(t, c, "projector-kill", window+4*time.Second, func(ctx context.Context, ending func()) (int, string, error) {
		deadline := time.Now().Add(window + 30*time.Second)
		n := 0
		for n < kills && time.Now().Before(deadline) {
			if !pause.For(ctx, between(300*time.Millisecond, 1200*time.Millisecond)) {
				break
			}
			i := rand.IntN(len(c.projectors))
			p := c.projectors[i]
			p.Kill()
			n++
			pause.For(ctx, between(0, 400*time.Millisecond))
			// Every other restart comes back under a new name, as with the
			// default host-pid name: the old name's entries are then only
			// recovered by a claim.
			if n%2 == 1 {
				setConsumer(p, fmt.Sprintf("projector-%d-%d", i+1, n))
			}
			ending()
			if err := p.Start(ctx); err != nil {
				return n, "kill -9", err
			}
		}
		return n, "kill -9", nil
	})
}

// kill -9 one of two intakes while requests are in flight, restart it;
// the client sends an unanswered vote again with the same key.
func TestIntakeKill(t *testing.T) {
	scenario(t)
	c := newCluster(t, clusterOptions{intakes: 2, projectors: 1})
	kills := prof.intakeKills
	window := time.Duration(kills) * 1800 * time.Millisecond
	run(t, c, "intake-kill", window+4*time.Second, func(ctx context.Context, ending func()) (int, string, error) {
		deadline := time.Now().Add(window + 30*time.Second)
		n := 0
		for n < kills && time.Now().Before(deadline) {
			if !pause.For(ctx, between(500*time.Millisecond, 1300*time.Millisecond)) {
				break
			}
			p := c.intakes[rand.IntN(len(c.intakes))]
			p.Kill()
			n++
			pause.For(ctx, between(100*time.Millisecond, 500*time.Millisecond))
			ending()
			if err := p.Start(ctx); err != nil {
				return n, "kill -9", err
			}
		}
		return n, "kill -9", nil
	})
}

// kill -9 Redis mid-load and start it again on its append-only file
// (appendfsync always): every vote answered 202 is in it.
func TestRedisRestart(t *testing.T) {
	scenario(t)
	c := newCluster(t, clusterOptions{intakes: 1, projectors: 2})
	restarts := prof.redisRestarts
	window := time.Duration(restarts) * 3 * time.Second
	run(t, c, "redis-restart", window+4*time.Second, func(ctx context.Context, ending func()) (int, string, error) {
		n := 0
		for n < restarts {
			if !pause.For(ctx, between(1500*time.Millisecond, 2500*time.Millisecond)) {
				break
			}
			c.redis.Kill()
			n++
			pause.For(ctx, between(200*time.Millisecond, 1000*time.Millisecond))
			ending()
			c.redis.Start()
		}
		return n, "kill -9 + start", nil
	})
}

// Crash PostgreSQL (immediate stop) mid-load and start it again.
func TestPostgresRestart(t *testing.T) {
	scenario(t)
	c := newCluster(t, clusterOptions{intakes: 1, projectors: 2, privatePostgres: true})
	restarts := prof.pgRestarts
	window := time.Duration(restarts) * 3500 * time.Millisecond
	run(t, c, "postgres-restart", window+4*time.Second, func(ctx context.Context, ending func()) (int, string, error) {
		n := 0
		for n < restarts {
			if !pause.For(ctx, between(1500*time.Millisecond, 2500*time.Millisecond)) {
				break
			}
			c.pg.Crash()
			n++
			pause.For(ctx, between(200*time.Millisecond, 1000*time.Millisecond))
			ending()
			c.pg.Start()
		}
		return n, "immediate stop + start", nil
	})
}

// Latency, then cut connections, between the projectors and PostgreSQL
// and between the intakes and Redis.
func TestNetworkFaults(t *testing.T) {
	scenario(t)
	var pgProxy, redisProxy *chaos.Proxy
	c := newCluster(t, clusterOptions{intakes: 1, projectors: 2,
		proxies: func(redisAddr, pgAddr string) (string, string) {
			var err error
			if redisProxy, err = chaos.NewProxy("intake-redis", redisAddr); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(redisProxy.Close)
			if pgProxy, err = chaos.NewProxy("projector-postgres", pgAddr); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pgProxy.Close)
			return redisProxy.Addr(), pgProxy.Addr()
		}})
	cycles := prof.netCycles
	window := time.Duration(cycles) * 12 * time.Second
	run(t, c, "network", window+4*time.Second, func(ctx context.Context, ending func()) (int, string, error) {
		n := 0
		step := func(f func() error) error {
			if err := f(); err != nil {
				return err
			}
			n++
			return nil
		}
		for range cycles {
			// Latency on both links.
			if err := step(func() error { return pgProxy.AddLatency(40, 20) }); err != nil {
				return n, "", err
			}
			if err := step(func() error { return redisProxy.AddLatency(20, 10) }); err != nil {
				return n, "", err
			}
			pause.For(ctx, 2*time.Second)
			ending()
			if err := pgProxy.RemoveLatency(); err != nil {
				return n, "", err
			}
			if err := redisProxy.RemoveLatency(); err != nil {
				return n, "", err
			}
			// Cut projector to PostgreSQL: connections closed, new ones refused.
			pgProxy.Cut()
			n++
			pause.For(ctx, between(2*time.Second, 3*time.Second))
			ending()
			if err := pgProxy.Restore(); err != nil {
				return n, "", err
			}
			pause.For(ctx, time.Second)
			// Cut intake to Redis.
			redisProxy.Cut()
			n++
			pause.For(ctx, between(2*time.Second, 3*time.Second))
			ending()
			if err := redisProxy.Restore(); err != nil {
				return n, "", err
			}
			pause.For(ctx, time.Second)
			// Reset every connection that sends data, for a while.
			if err := step(pgProxy.ResetPeers); err != nil {
				return n, "", err
			}
			if err := step(redisProxy.ResetPeers); err != nil {
				return n, "", err
			}
			pause.For(ctx, between(1*time.Second, 2*time.Second))
			ending()
			if err := pgProxy.StopResetPeers(); err != nil {
				return n, "", err
			}
			if err := redisProxy.StopResetPeers(); err != nil {
				return n, "", err
			}
		}
		return n, "latency/cut/reset", nil
	})
}

// Stop both projectors until the backlog reaches intake's bound: intake
// answers 503 with Retry-After, the client sends again, and once the
// projectors are back the backlog drains and every vote is counted once.
func TestBacklogFull(t *testing.T) {
	scenario(t)
	c := newCluster(t, clusterOptions{intakes: 1, projectors: 2, maxBacklog: 400})
	outages := prof.backlogOutages
	window := time.Duration(outages) * 6 * time.Second
	run(t, c, "backlog-full", window+4*time.Second, func(ctx context.Context, ending func()) (int, string, error) {
		n := 0
		for n < outages {
			if !pause.For(ctx, between(1*time.Second, 2*time.Second)) {
				break
			}
			for _, p := range c.projectors {
				p.Kill()
			}
			n++
			// Wait until every shard is full (bounded), and a little more.
			for i := 0; i < 100; i++ {
				st, err := projector.Inspect(ctx, c.rdb, c.keys)
				if err == nil && !slices.ContainsFunc(st.Shards, func(s projector.ShardStatus) bool { return s.Backlog < 400 }) {
					break
				}
				pause.For(ctx, 50*time.Millisecond)
			}
			pause.For(ctx, 2*time.Second)
			for _, p := range c.projectors {
				ending()
				if err := p.Start(ctx); err != nil {
					return n, "projectors down, backlog full", err
				}
			}
		}
		return n, "projectors down, backlog full", nil
	})
}

// Write poison entries (undecodable, or a payload whose fingerprint does
// not match) on the streams among the votes: each must end in the
// dead-letter stream with its reason, and nothing else may.
func TestPoisonEntries(t *testing.T) {
	scenario(t)
	c := newCluster(t, clusterOptions{intakes: 1, projectors: 2})
	count := prof.poison
	window := time.Duration(count) * 300 * time.Millisecond
	var mu sync.Mutex
	want := map[string]projector.Reason{}
	runWith(t, c, "poison", window+4*time.Second, func(ctx context.Context, ending func()) (int, string, error) {
		n := 0
		for n < count {
			if !pause.For(ctx, between(100*time.Millisecond, 500*time.Millisecond)) {
				break
			}
			key := c.keys.Streams()[rand.IntN(shards)]
			values, reason := []any{"v", "1", "garbage", "x"}, projector.ReasonUndecodable
			if n%2 == 1 {
				// Well formed, but its fingerprint is not its payload's.
				values = []any{
					stream.FieldVersion, "1", stream.FieldPrincipal, "p-poison", stream.FieldEventID, fmt.Sprintf("poison-%d", n),
					stream.FieldPoll, "no-such-poll", stream.FieldCandidate, "a", stream.FieldFingerprint, strings.Repeat("0", 64),
					stream.FieldReceivedAt, strconv.FormatInt(time.Now().UnixMicro(), 10),
				}
				reason = projector.ReasonFingerprintMismatch
			}
			id, err := c.rdb.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: values}).Result()
			if err != nil {
				return n, "poison entries", err
			}
			ending()
			mu.Lock()
			want[id] = reason
			mu.Unlock()
			n++
		}
		return n, "poison entries", nil
	}, func() map[string]projector.Reason {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(want)
	})
}

// Cut the projectors from PostgreSQL for longer than --min-idle: the
// entries they hold stay pending, and are claimed back and forth while
// the link is down; once it is back every vote is counted once.
func TestPostgresOutage(t *testing.T) {
	scenario(t)
	var pgProxy *chaos.Proxy
	c := newCluster(t, clusterOptions{intakes: 1, projectors: 2,
		proxies: func(redisAddr, pgAddr string) (string, string) {
			var err error
			if pgProxy, err = chaos.NewProxy("projector-postgres", pgAddr); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pgProxy.Close)
			return redisAddr, pgProxy.Addr()
		}})
	outages := prof.pgOutages
	outage := prof.pgOutage
	window := time.Duration(outages) * (outage + 2*time.Second)
	run(t, c, "postgres-outage", window+4*time.Second, func(ctx context.Context, ending func()) (int, string, error) {
		n := 0
		for n < outages {
			if !pause.For(ctx, between(1*time.Second, 2*time.Second)) {
				break
			}
			pgProxy.Cut()
			n++
			pause.For(ctx, outage)
			ending()
			if err := pgProxy.Restore(); err != nil {
				return n, "", err
			}
		}
		return n, fmt.Sprintf("projector-PostgreSQL link cut for %s", outage), nil
	})
}

// A slow link to PostgreSQL with a --min-idle shorter than a batch takes:
// live projectors claim each other's entries while they are being applied,
// so the same entries are applied by two projectors at once, and
// projectors are killed meanwhile.
func TestSlowPostgresOverlap(t *testing.T) {
	scenario(t)
	var pgProxy *chaos.Proxy
	c := newCluster(t, clusterOptions{intakes: 1, projectors: 2,
		projectorArgs: []string{"--min-idle", "1s", "--claim-interval", "250ms"},
		proxies: func(redisAddr, pgAddr string) (string, string) {
			var err error
			if pgProxy, err = chaos.NewProxy("projector-postgres", pgAddr); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pgProxy.Close)
			return redisAddr, pgProxy.Addr()
		}})
	kills := prof.overlapKills
	window := time.Duration(kills)*2*time.Second + 6*time.Second
	run(t, c, "slow-postgres-overlap", window+4*time.Second, func(ctx context.Context, ending func()) (int, string, error) {
		latency := 150
		if v, err := strconv.Atoi(os.Getenv("TALLY_CHAOS_OVERLAP_LATENCY_MS")); err == nil && v > 0 {
			latency = v
		}
		if err := pgProxy.AddLatency(latency, latency/3); err != nil {
			return 0, "", err
		}
		n := 0
		deadline := time.Now().Add(window)
		pause.For(ctx, 3*time.Second)
		for n < kills && time.Now().Before(deadline) {
			p := c.projectors[rand.IntN(len(c.projectors))]
			p.Kill()
			n++
			pause.For(ctx, between(100*time.Millisecond, 400*time.Millisecond))
			if err := p.Start(ctx); err != nil {
				return n, "", err
			}
			pause.For(ctx, between(1*time.Second, 2*time.Second))
		}
		pause.For(ctx, 3*time.Second)
		ending()
		if err := pgProxy.RemoveLatency(); err != nil {
			return n, "", err
		}
		return n + 1, fmt.Sprintf("kill -9 under %dms PostgreSQL latency, --min-idle 1s", latency), nil
	})
}
