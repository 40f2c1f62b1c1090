package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"tally/vote"
)

// unnestInsertSQL is the schema's intrinsic floor for an append: the rows
// alone, as the append's statements pass them (arrays unnested), into the
// same table with the same indexes; none of the ledger's rules, no
// projection, no log.
const unnestInsertSQL = `
INSERT INTO poll_events (poll_id, candidate_id, principal_id, client_event_id, fingerprint, received_at)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::timestamptz[])`

// measureFloor: U, unnestInsertSQL of the projector's rows in its batches
// from its number of writers, the floor P is compared with.
func measureFloor(ctx context.Context, e *env, sz sizes, t *table) error {
	load := loadAvg()
	const batch, writers = 1000, 2
	rate, cpu, err := e.unnestFloor(ctx, sz.projector, batch, writers)
	if err != nil {
		return err
	}
	t.add(fig{id: "U", what: fmt.Sprintf("(u) the schema's floor: a bare `INSERT ... SELECT FROM unnest(...)` of P's %s rows into poll_events with its indexes, batches of %d, %d writers, no rules, no projection, no log", count(sz.projector), batch, writers),
		value: rate, unit: "events/s", load: load, extra: fmt.Sprintf("CPU per event: PostgreSQL %.1f µs", cpu),
		command: "bench -only floor  (each batch its own transaction, the same ids as P)"})
	t.add(fig{id: "UPG", what: "PostgreSQL's CPU per event in U", value: cpu, unit: "µs", load: load,
		command: "/proc/PID/stat of the database's backends, before and after U"})
	return nil
}

// unnestFloor inserts events 0..n-1 (syntheticEvent over 10 polls, as P's
// stream) with unnestInsertSQL in batches from writers connections, each
// batch its own transaction, and returns events/s and PostgreSQL's CPU per
// event.
func (e *env) unnestFloor(ctx context.Context, n, batch, writers int) (rate, pgCPU float64, err error) {
	const what, polls = "floor", 10
	_, pool, err := e.database(ctx, what)
	if err != nil {
		return 0, 0, err
	}
	defer pool.Close()
	if err := createPolls(ctx, pool, polls); err != nil {
		return 0, 0, err
	}
	now := time.Now()
	fps := map[string][]byte{}
	for p := range polls {
		for _, c := range benchChoices {
			fp := vote.Fingerprint(pollID(p), c)
			fps[pollID(p)+"\x00"+c] = fp[:]
		}
	}
	cpu0 := e.backendCPU(ctx, "tally_bench_"+e.run+"_"+what)
	var next atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	start := time.Now()
	for range writers {
		g.Go(func() error {
			conn, err := pool.Acquire(gctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			for {
				from := int(next.Add(int64(batch))) - batch
				if from >= n {
					return nil
				}
				to := min(from+batch, n)
				polls, cands, principals, keys := make([]string, 0, to-from), make([]string, 0, to-from), make([]string, 0, to-from), make([]string, 0, to-from)
				fpb, received := make([][]byte, 0, to-from), make([]time.Time, 0, to-from)
				for i := from; i < to; i++ {
					ev := syntheticEvent(i, 10, now)
					polls, cands = append(polls, ev.PollID), append(cands, ev.CandidateID)
					principals, keys = append(principals, ev.PrincipalID), append(keys, ev.ClientEventID)
					fpb, received = append(fpb, fps[ev.PollID+"\x00"+ev.CandidateID]), append(received, ev.ReceivedAt)
				}
				if _, err := conn.Exec(gctx, unnestInsertSQL, polls, cands, principals, keys, fpb, received); err != nil {
					return fmt.Errorf("insert: %w", err)
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		return 0, 0, err
	}
	rate = float64(n) / time.Since(start).Seconds()
	pgCPU = 1e6 * (e.backendCPU(ctx, "tally_bench_"+e.run+"_"+what) - cpu0) / float64(n)
	return rate, pgCPU, nil
}
