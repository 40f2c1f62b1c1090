package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"tally/ledger"
)

// This file owns H, the cost of one hot poll: batches of first responses
// appended by two writers into one poll, against a poll each and against
// one writer, with how long the poll's tally rows stay locked and what
// the writers wait on. measureScaling (scaling.go) runs it beside S.

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
