package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"tally/ledger"
)

// This file owns S and H, the figures the section "Scaling with cores" of
// BENCHMARKS.md predicts from. S is E in four shapes, one or two intakes
// times a projector with one or two workers, with the CPU time per vote of
// each part; H is the cost of one hot poll: batches appended by two
// writers into one poll against a poll each. It also holds cpuWindow, the
// CPU each part uses while tally loadtest sends, which loadShape follows
// for every end-to-end run.

// scalingShapes are S's shapes, in the order of their rows.
var scalingShapes = []struct {
	id               string
	intakes, workers int
}{{"S11", 1, 1}, {"S12", 1, 2}, {"S21", 2, 1}, {"S22", 2, 2}}

// loadtestConcurrency is S's tally loadtest --concurrency, E's: the votes
// under way at once, whatever the intakes.
const loadtestConcurrency = 32

// measureScaling: S11, S12, S21 and S22, then H1, H2 and H2A.
func measureScaling(ctx context.Context, e *env, sz sizes, t *table) error {
	load := loadAvg()
	runs := make([][]e2eResult, len(scalingShapes))
	for round := range sz.scalingRounds {
		order := []int{0, 1, 2, 3}
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, i := range order {
			r, err := e.scalingRun(ctx, i, round, sz.scalingFor)
			if err != nil {
				return fmt.Errorf("%s: %w", scalingShapes[i].id, err)
			}
			runs[i] = append(runs[i], r)
		}
	}
	for i, sh := range scalingShapes {
		rs := runs[i]
		var rates, p50s, p99s []string
		var sum float64
		var cpus []cpuPerVote
		for _, r := range rs {
			sum += r.rate
			rates, p50s, p99s = append(rates, thousands(r.rate)), append(p50s, fmt.Sprintf("%.0f", r.p50)), append(p99s, fmt.Sprintf("%.0f", r.p99))
			cpus = append(cpus, r.cpu)
		}
		t.add(fig{id: sh.id, what: fmt.Sprintf("scaling: end to end as E with %d intake(s) and a projector with %d worker(s); mean of %d round(s) of %s, the shapes alternating",
			sh.intakes, sh.workers, len(rs), sz.scalingFor),
			value: sum / float64(len(rs)), unit: "votes/s", load: load, command: rs[0].command,
			extra: fmt.Sprintf("rounds %s votes/s; accept-to-recorded p50 %s ms, p99 %s ms; %s",
				strings.Join(rates, ", "), strings.Join(p50s, ", "), strings.Join(p99s, ", "), poolCPU(cpus))})
	}
	return measureHotPoll(ctx, e, sz, t)
}

// scalingRun is one round of S's shape i: a fresh database and Redis
// prefix, the shape's intakes on free loopback ports, and tally loadtest
// against all of them for d.
func (e *env) scalingRun(ctx context.Context, i, round int, d time.Duration) (e2eResult, error) {
	s := scalingShapes[i]
	what := fmt.Sprintf("%s_%d", strings.ToLower(s.id), round)
	keys := e.prefix(strings.ReplaceAll(what, "_", ""))
	defer e.dropPrefix(context.WithoutCancel(ctx), keys.Prefix())
	ports, err := freePorts(s.intakes)
	if err != nil {
		return e2eResult{}, err
	}
	sh := shape{projector: []string{"--workers", itoa(s.workers)}}
	for _, p := range ports {
		sh.addrs = append(sh.addrs, "127.0.0.1:"+itoa(p))
	}
	fmt.Fprintf(os.Stderr, "bench: scaling: %s round %d (load %s)\n", s.id, round+1, loadAvg())
	return e.loadShape(ctx, what, sh, []string{"--redis-url", e.redisURL, "--stream-prefix", keys.Prefix()}, d, loadtestConcurrency)
}

// cpuPerVote is the CPU time per vote answered 202 of each part of a
// pipeline, in µs, over votes votes.
type cpuPerVote struct {
	votes                                       int64
	intakes, projector, postgres, redis, client float64
}

func (c cpuPerVote) total() float64 {
	return c.intakes + c.projector + c.postgres + c.redis + c.client
}

func (c cpuPerVote) String() string {
	if c.votes == 0 {
		return "CPU per vote: not measured (too short a sending)"
	}
	return fmt.Sprintf("CPU per vote: intake(s) %.1f µs, projector %.1f µs, PostgreSQL %.1f µs, Redis %.1f µs, loadtest %.1f µs; total %.1f µs (over %s votes)",
		c.intakes, c.projector, c.postgres, c.redis, c.client, c.total(), thousands(float64(c.votes)))
}

// poolCPU is the CPU per vote over the votes of every run of cs.
func poolCPU(cs []cpuPerVote) cpuPerVote {
	var p cpuPerVote
	for _, c := range cs {
		n := float64(c.votes)
		p.votes += c.votes
		p.intakes += n * c.intakes
		p.projector += n * c.projector
		p.postgres += n * c.postgres
		p.redis += n * c.redis
		p.client += n * c.client
	}
	if p.votes > 0 {
		n := float64(p.votes)
		p.intakes, p.projector, p.postgres, p.redis, p.client = p.intakes/n, p.projector/n, p.postgres/n, p.redis/n, p.client/n
	}
	return p
}

// progressLine is a progress line of tally loadtest: its phase and the
// votes answered 202 so far.
var progressLine = regexp.MustCompile(`^loadtest: (\w+)\s+[0-9.]+s\s+sent \d+\s+accepted (\d+)`)

// cpuMark is the votes answered 202 and the CPU time of each part at one
// progress line.
type cpuMark struct {
	accepted int64
	cpu      cpuSnap
}

// cpuWindow is what followCPU saw of one tally loadtest run: the CPU at the
// line that says the sending starts, and at each progress line (about a
// second apart) while it sends.
type cpuWindow struct {
	start   *cpuMark
	sending []cpuMark
}

// followCPU reads tally loadtest's stderr from r until it ends, copies
// every line but the progress to logFile, and takes the CPU of p's
// processes, of the backends connected to db, of Redis and of client
// (the loadtest) as cpuWindow says.
func (e *env) followCPU(ctx context.Context, r io.Reader, p *pipeline, db string, client int) cpuWindow {
	var w cpuWindow
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if m := progressLine.FindStringSubmatch(line); m != nil {
			if m[1] == "sending" {
				n, _ := strconv.ParseInt(m[2], 10, 64)
				w.sending = append(w.sending, cpuMark{accepted: n, cpu: e.pipelineCPU(ctx, p, db, client)})
			}
			continue
		}
		if strings.HasPrefix(line, "loadtest: polls ") {
			w.start = &cpuMark{cpu: e.pipelineCPU(ctx, p, db, client)}
		}
		fmt.Fprintln(logFile, line)
	}
	_, _ = io.Copy(io.Discard, r) // what a line too long for the scanner left
	return w
}

// perVote is the CPU per vote from the first progress line of the
// sending (past a second of warm-up) to the last; with fewer than three
// such lines, from the line that says the sending starts.
func (w cpuWindow) perVote() cpuPerVote {
	marks := w.sending
	if len(marks) < 3 && w.start != nil {
		marks = append([]cpuMark{*w.start}, marks...)
	}
	if len(marks) < 2 {
		return cpuPerVote{}
	}
	a, b := marks[0], marks[len(marks)-1]
	n := b.accepted - a.accepted
	if n <= 0 {
		return cpuPerVote{}
	}
	us := func(from, to float64) float64 { return 1e6 * (to - from) / float64(n) }
	return cpuPerVote{votes: n,
		intakes: us(a.cpu.intakes, b.cpu.intakes), projector: us(a.cpu.projector, b.cpu.projector),
		postgres: us(a.cpu.postgres, b.cpu.postgres), redis: us(a.cpu.redis, b.cpu.redis), client: us(a.cpu.client, b.cpu.client)}
}

// hotBatch is H's batch: the projector's shipped --batch-size.
const hotBatch = 1000

// measureHotPoll: H1, one writer appending batches into one poll; H2, two
// writers into that one poll; H2A, two writers into a poll each. The
// cases alternate, sz.scalingRounds rounds of each.
func measureHotPoll(ctx context.Context, e *env, sz sizes, t *table) error {
	load := loadAvg()
	cases := []struct {
		id      string
		writers int
		apart   bool
		what    string
	}{
		{"H1", 1, false, "one writer"},
		{"H2", 2, false, "two writers, both into the one poll"},
		{"H2A", 2, true, "two writers, each into a poll of its own"},
	}
	runs := make([][]hotResult, len(cases))
	for round := range sz.scalingRounds {
		order := []int{0, 1, 2}
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, i := range order {
			c := cases[i]
			r, err := e.hotPoll(ctx, fmt.Sprintf("%s_%d", strings.ToLower(c.id), round), c.writers, c.apart, sz.hotEvents, sz.hotFor)
			if err != nil {
				return fmt.Errorf("%s: %w", c.id, err)
			}
			runs[i] = append(runs[i], r)
		}
	}
	for i, c := range cases {
		var sum, events, pg, writers, appendMS, held, notify, wal float64
		waits := locks{waiting: map[string]float64{}}
		var rates []string
		for _, r := range runs[i] {
			sum += r.rate
			rates = append(rates, thousands(r.rate))
			events += float64(r.events)
			pg += float64(r.events) * r.pgCPU
			writers += float64(r.events) * r.writerCPU
			appendMS += r.appendMS
			for k, v := range r.locks.waiting {
				waits.waiting[k] += v / float64(len(runs[i]))
			}
			held += r.locks.rowsHeld
			notify += r.locks.notifyHeld
			wal += float64(r.events) * r.walBytes
		}
		n := float64(len(runs[i]))
		t.add(fig{id: c.id, what: fmt.Sprintf("hot poll: ledger.Store.Append of batches of %d first responses, %s; mean of %d round(s) of at most %s or %s events",
			hotBatch, c.what, len(runs[i]), sz.hotFor, count(sz.hotEvents)),
			value: sum / n, unit: "events/s", load: load,
			extra: fmt.Sprintf("rounds %s events/s; mean Append %.1f ms; poll0's tally rows locked in %.0f%% of probes, the NOTIFY lock held in %.0f%% of samples, %s; CPU per event: PostgreSQL %.1f µs, the writers (bench) %.1f µs; WAL %.0f B per event (the server's, other clients too)",
				strings.Join(rates, ", "), appendMS/n, 100*held/n, 100*notify/n, waits, pg/events, writers/events, wal/events),
			command: "bench -only scaling  (Append from goroutines of the bench, one pool of 16 connections)"})
	}
	return nil
}

// hotResult is one run of hotPoll.
type hotResult struct {
	rate     float64 // events/s
	events   int64
	appendMS float64 // mean duration of one Append
	// CPU per event in µs: the PostgreSQL backends, and the bench process
	// (the writers: the rows' encoding and the log's hashes).
	pgCPU, writerCPU float64
	locks            locks
	walBytes         float64 // per event: the whole server's WAL, other clients too
}

// hotPoll appends batches of hotBatch first responses, each of its own
// principal, with ledger.Store.Append from writers goroutines, for d or
// until n events, on a fresh database: every writer into one poll, or
// with apart each into a poll of its own.
func (e *env) hotPoll(ctx context.Context, what string, writers int, apart bool, n int, d time.Duration) (hotResult, error) {
	var res hotResult
	url, pool, err := e.database(ctx, what)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	if err := createPolls(ctx, pool, writers); err != nil {
		return res, err
	}
	store, err := ledger.New(pool, ledger.Config{})
	if err != nil {
		return res, err
	}
	db := "tally_bench_" + e.run + "_" + what
	pg0, self0, wal0 := e.backendCPU(ctx, db), cpuSeconds(os.Getpid()), e.walBytes(ctx)
	stopSampling := e.sampleLocks(ctx, url, db, writers)
	var events, appends, busy atomic.Int64
	began := time.Now()
	deadline := began.Add(d)
	g, gctx := errgroup.WithContext(ctx)
	for w := range writers {
		poll := pollID(0)
		if apart {
			poll = pollID(w)
		}
		g.Go(func() error {
			batch := make([]ledger.Event, hotBatch)
			for i := 0; i+hotBatch <= n/writers && time.Now().Before(deadline); i += hotBatch {
				now := time.Now()
				for j := range batch {
					batch[j] = ledger.Event{PrincipalID: fmt.Sprintf("w%d-%d", w, i+j), ClientEventID: "k1", PollID: poll,
						CandidateID: benchChoices[(i+j)%len(benchChoices)], ReceivedAt: now}
				}
				t0 := time.Now()
				outs, err := store.Append(gctx, batch)
				if err != nil {
					return err
				}
				busy.Add(int64(time.Since(t0)))
				for _, o := range outs {
					if o.Status != ledger.StatusRecorded {
						return fmt.Errorf("an event of a fresh principal was not recorded: %v", o.Status)
					}
				}
				events.Add(int64(len(batch)))
				appends.Add(1)
			}
			return nil
		})
	}
	err = g.Wait()
	elapsed := time.Since(began)
	res.locks = stopSampling()
	if err != nil {
		return res, err
	}
	res.events = events.Load()
	if res.events == 0 {
		return res, fmt.Errorf("no batch appended within %s", d)
	}
	res.rate = float64(res.events) / elapsed.Seconds()
	res.appendMS = float64(busy.Load()) / 1e6 / float64(appends.Load())
	res.pgCPU = 1e6 * (e.backendCPU(ctx, db) - pg0) / float64(res.events)
	res.writerCPU = 1e6 * (cpuSeconds(os.Getpid()) - self0) / float64(res.events)
	res.walBytes = (e.walBytes(ctx) - wal0) / float64(res.events)
	return res, nil
}

// walBytes is the server's WAL position, in bytes (0 when it cannot say).
func (e *env) walBytes(ctx context.Context) float64 {
	conn, err := pgx.Connect(ctx, e.adminURL)
	if err != nil {
		return 0
	}
	defer conn.Close(ctx)
	var b float64
	if conn.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::float8`).Scan(&b) != nil {
		return 0
	}
	return b
}

// notifyLockSQL counts the holders of the NOTIFY queue's lock: an object
// lock on database 0 of pg_database.
const notifyLockSQL = `SELECT count(*) FROM pg_locks
WHERE locktype = 'object' AND classid = 'pg_database'::regclass AND objid = 0 AND database = 0 AND granted`

// rowsLockedSQL counts a poll's poll_results rows that a transaction in
// progress updated (their visible version's xmax): a read that takes no
// lock, where `FOR SHARE NOWAIT` would write to the rows and make the
// appends wait on the probe.
const rowsLockedSQL = `SELECT count(*) FROM poll_results
WHERE poll_id = $1 AND xmax <> '0'::xid AND txid_status(xmax::text::bigint) = 'in progress'`

// locks is what sampleLocks saw: the writers' share of time waiting on
// a lock, by the lock's kind (pg_stat_activity's wait_event: transactionid
// for another transaction's rows, object for the NOTIFY queue's lock taken
// at commit, extend for a relation's extension), and the share of probes
// that found poll0's tally rows locked; notifyHeld is the share of
// samples in which a transaction of any database held the NOTIFY queue's
// lock, which PostgreSQL takes in the commit of every transaction that
// sent a NOTIFY (as every append does) and holds until the commit is
// done.
type locks struct {
	waiting              map[string]float64
	rowsHeld, notifyHeld float64
}

// String is the lock waits, the kinds in order of their share.
func (l locks) String() string {
	var total float64
	kinds := make([]string, 0, len(l.waiting))
	for k, v := range l.waiting {
		total += v
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(a, b string) int { return cmp.Compare(l.waiting[b], l.waiting[a]) })
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", k, 100*l.waiting[k]))
	}
	s := fmt.Sprintf("the writers waiting on a lock %.0f%% of their time", 100*total)
	if len(parts) > 0 {
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	return s
}

// sampleLocks samples, every 5ms until the function it returns is called,
// the backends connected to db that wait on a lock (over a connection to
// another database), and whether poll0's poll_results rows are locked
// (rowsLockedSQL over a connection to url): an append holds them from its
// upsert of the tallies to its commit, the part of one poll's appends that
// takes turns.
func (e *env) sampleLocks(ctx context.Context, url, db string, writers int) func() locks {
	ctx, cancel := context.WithCancel(ctx)
	var samples, probes, held, notify int64
	waiting := map[string]int64{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		admin, err := pgx.Connect(ctx, e.adminURL)
		if err != nil {
			return
		}
		defer admin.Close(context.WithoutCancel(ctx))
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return
		}
		defer conn.Close(context.WithoutCancel(ctx))
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			rows, err := admin.Query(ctx, `SELECT wait_event FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock'`, db)
			if err == nil {
				if kinds, err := pgx.CollectRows(rows, pgx.RowTo[string]); err == nil {
					samples++
					for _, k := range kinds {
						waiting[k]++
					}
				}
			}
			var n int64
			if admin.QueryRow(ctx, notifyLockSQL).Scan(&n) == nil && n > 0 {
				notify++
			}
			if conn.QueryRow(ctx, rowsLockedSQL, pollID(0)).Scan(&n) == nil {
				probes++
				if n > 0 {
					held++
				}
			}
		}
	}()
	return func() locks {
		cancel()
		<-done
		l := locks{waiting: map[string]float64{}}
		if samples > 0 {
			l.notifyHeld = float64(notify) / float64(samples)
		}
		for k, n := range waiting {
			l.waiting[k] = float64(n) / float64(samples*int64(writers))
		}
		if probes > 0 {
			l.rowsHeld = float64(held) / float64(probes)
		}
		return l
	}
}
