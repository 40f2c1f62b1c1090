package ledger

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"tally/internal/procstat"
	"tally/internal/testenv"
)

// floorSQL is the row alone, as an append passes it: the batch's arrays
// unnested into poll_events with its indexes, none of the rules.
const floorSQL = `
INSERT INTO poll_events (poll_id, candidate_id, principal_id, client_event_id, fingerprint, received_at)
SELECT p, c, u, k, f, r FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::timestamptz[]) AS i(u, k, p, c, f, r)`

// BenchmarkAppendCost says where PostgreSQL's CPU goes in an append of new
// events, the projector's common case, by adding its steps one at a time
// on a ledger of 50k rows, in batches of 1000 over 10 polls, each step in
// its own transaction from a connection of its own:
//
//	floor       floorSQL: the row and its indexes, nothing else
//	insert      the optimistic insert (catalog and rejection probes, the
//	            insert, the projection) under its savepoint
//	insert+log  the same and the polls' logs (head locks, leaves, tiles)
//	append      Store.Append (the same and the notifications)
//	append×2    Store.Append from two connections at once, over the
//	            same polls, as the projector's two workers
//
// Each iteration runs every step for 5 batches, in turn, so that load from
// elsewhere falls on all of them alike. It reports each step's backend CPU
// per event (pg-µs/event, read from /proc: 0 when the server is not on
// this machine) and wall time per event.
func BenchmarkAppendCost(b *testing.B) {
	ctx := context.Background()
	db := testenv.Postgres(b)
	choices := []string{"a", "b", "c", "d"}
	one := newCostConn(ctx, b, db.URL, 1)
	for p := range 10 {
		if err := one.store.CreatePoll(ctx, Poll{ID: "poll" + strconv.Itoa(p), Title: "cost", OpensAt: time.Unix(0, 0), Choices: choices}); err != nil {
			b.Fatal(err)
		}
	}
	two := newCostConn(ctx, b, db.URL, 2)
	n := 0
	batch := func() []Event {
		now := time.Now()
		evs := make([]Event, 1000)
		for j := range evs {
			n++
			evs[j] = Event{PrincipalID: "u" + strconv.Itoa(n), ClientEventID: "k1", PollID: "poll" + strconv.Itoa(n%10),
				CandidateID: choices[(n/10)%len(choices)], ReceivedAt: now}
		}
		return evs
	}
	for range 50 {
		if _, err := one.store.Append(ctx, batch()); err != nil {
			b.Fatal(err)
		}
	}
	steps := []struct {
		name   string
		conn   *costConn
		events int // per run
		run    func() error
	}{
		{"floor", one, 1000, func() error { _, err := one.pool.Exec(ctx, floorSQL, eventArgs(batch())...); return err }},
		{"insert", one, 1000, func() error { return one.inTx(ctx, batch(), false) }},
		{"insert+log", one, 1000, func() error { return one.inTx(ctx, batch(), true) }},
		{"append", one, 1000, func() error { _, err := one.store.Append(ctx, batch()); return err }},
		{"append×2", two, 2000, func() error {
			b1, b2 := batch(), batch()
			errs := make(chan error, 1)
			go func() { _, err := two.store.Append(ctx, b2); errs <- err }()
			_, err := two.store.Append(ctx, b1)
			if err2 := <-errs; err == nil {
				err = err2
			}
			return err
		}},
	}
	cpu := make([]float64, len(steps))
	wall := make([]time.Duration, len(steps))
	events := make([]int, len(steps))
	b.ResetTimer()
	for range b.N {
		for i, s := range steps {
			c0, t0 := s.conn.cpu(), time.Now()
			for range 5 {
				if err := s.run(); err != nil {
					b.Fatalf("%s: %v", s.name, err)
				}
			}
			cpu[i] += s.conn.cpu() - c0
			wall[i] += time.Since(t0)
			events[i] += 5 * s.events
		}
	}
	for i, s := range steps {
		b.ReportMetric(1e6*cpu[i]/float64(events[i]), s.name+"-pg-µs/event")
		b.ReportMetric(float64(wall[i].Microseconds())/float64(events[i]), s.name+"-wall-µs/event")
	}
}

// costConn is a pool of a fixed number of connections, whose backends'
// CPU time it can read, and a Store on it.
type costConn struct {
	pool  *pgxpool.Pool
	store *Store
	pids  []int
}

func newCostConn(ctx context.Context, b *testing.B, url string, conns int32) *costConn {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MinConns, cfg.MaxConns = conns, conns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	store, err := New(pool, Config{})
	if err != nil {
		b.Fatal(err)
	}
	c := &costConn{pool: pool, store: store}
	held := make([]*pgxpool.Conn, conns)
	for i := range held {
		if held[i], err = pool.Acquire(ctx); err != nil {
			b.Fatal(err)
		}
		var pid int
		if err := held[i].QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			b.Fatal(err)
		}
		c.pids = append(c.pids, pid)
	}
	for _, h := range held {
		h.Release()
	}
	return c
}

// cpu is the CPU time c's backends have used, in seconds.
func (c *costConn) cpu() float64 {
	var s float64
	for _, pid := range c.pids {
		s += procstat.CPUSeconds(pid)
	}
	return s
}

// inTx runs the optimistic insert of events in a transaction of its own,
// and with withLog their polls' logs too, and commits.
func (c *costConn) inTx(ctx context.Context, events []Event, withLog bool) error {
	return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		in := appendInput{events: events, fps: fingerprints(events), ballotOK: make([]bool, len(events)), latest: make([]bool, len(events))}
		seqs, err := insertFresh(ctx, tx, in, freshEvents(events, in.latest))
		if err != nil || !withLog {
			return err
		}
		if len(seqs) != len(events) {
			return fmt.Errorf("inserted %d of %d new events", len(seqs), len(events))
		}
		outcomes := make([]Outcome, len(events))
		for i := range events {
			outcomes[i] = Outcome{Status: StatusRecorded, Seq: seqs[i]}
		}
		_, err = appendLogs(ctx, tx, events, outcomes)
		return err
	})
}

// eventArgs are floorSQL's arguments for events.
func eventArgs(events []Event) []any {
	fps := fingerprints(events)
	n := len(events)
	principals, keys, polls, candidates := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	fpb, received := make([][]byte, n), make([]time.Time, n)
	for i, e := range events {
		principals[i], keys[i], polls[i], candidates[i], received[i] = e.PrincipalID, e.ClientEventID, e.PollID, e.CandidateID, e.ReceivedAt
		fpb[i] = fps[i][:]
	}
	return []any{principals, keys, polls, candidates, fpb, received}
}
