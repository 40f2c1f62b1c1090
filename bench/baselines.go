package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"tally/vote"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"
)

// naiveUpdateSQL is what a user without a ledger would run for each vote.
const naiveUpdateSQL = `UPDATE poll_results SET vote_count = vote_count + 1 WHERE poll_id = $1 AND candidate_id = $2`

// naive runs naiveUpdateSQL, one vote per autocommitted statement, from
// clients concurrent connections over 10 polls of 4 choices, until max
// votes or limit, and returns votes/s.
func (e *env) naive(ctx context.Context, clients, max int, limit time.Duration) (float64, error) {
	_, pool, err := e.database(ctx, "naive")
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	const polls = 10
	if err := createPolls(ctx, pool, polls); err != nil {
		return 0, err
	}
	if _, err := pool.Exec(ctx, `INSERT INTO poll_results (poll_id, candidate_id, vote_count)
SELECT poll_id, candidate_id, 0 FROM poll_choices ON CONFLICT DO NOTHING`); err != nil {
		return 0, err
	}
	var done atomic.Int64
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	start := time.Now()
	for range clients {
		g.Go(func() error {
			conn, err := pool.Acquire(gctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			for done.Add(1) <= int64(max) {
				i := rand.IntN(polls * len(benchChoices))
				if _, err := conn.Exec(gctx, naiveUpdateSQL, pollID(i%polls), benchChoices[i/polls]); err != nil {
					done.Add(-1)
					if gctx.Err() != nil {
						return nil
					}
					return err
				}
			}
			done.Add(-1)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	elapsed := time.Since(start)
	var sum int64
	if err := pool.QueryRow(context.WithoutCancel(ctx), `SELECT sum(vote_count) FROM poll_results`).Scan(&sum); err != nil {
		return 0, err
	}
	return float64(sum) / elapsed.Seconds(), nil
}

// copyColumns are the ledger columns an append writes for a single
// choice; a ballot of another kind adds its own (copyBallotColumns).
var copyColumns = []string{"poll_id", "candidate_id", "principal_id", "client_event_id", "fingerprint", "received_at"}

var copyBallotColumns = append(append([]string{}, copyColumns...), "ballot", "latest")

// copyRows writes events 0..n-1 of l into poll_events of pool's database
// with COPY (pgx CopyFrom, binary), in chunks of chunk rows, each its own
// transaction, from writers connections, and returns rows/s.
func copyRows(ctx context.Context, conns func(context.Context) (*pgx.Conn, func(), error), l load, n, chunk, writers, polls int) (float64, error) {
	now := time.Now()
	fps := map[[2]string][]byte{}
	for p := range polls {
		for _, b := range l.ballots {
			fp := vote.Fingerprint(pollID(p), b)
			fps[[2]string{pollID(p), b}] = fp[:]
		}
	}
	columns, ballots := copyColumns, !l.rules.IsDefault()
	if ballots {
		columns = copyBallotColumns
	}
	latest := l.rules.Answers == vote.AnswersLatest
	var next atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	start := time.Now()
	for range writers {
		g.Go(func() error {
			conn, release, err := conns(gctx)
			if err != nil {
				return err
			}
			defer release()
			for {
				from := int(next.Add(int64(chunk))) - chunk
				if from >= n {
					return nil
				}
				to := min(from+chunk, n)
				i := from
				_, err := conn.CopyFrom(gctx, pgx.Identifier{"poll_events"}, columns, pgx.CopyFromFunc(func() ([]any, error) {
					if i >= to {
						return nil, nil
					}
					ev := l.event(i, polls, now)
					i++
					row := []any{ev.PollID, ev.CandidateID, ev.PrincipalID, ev.ClientEventID, fps[[2]string{ev.PollID, ev.Answer()}], ev.ReceivedAt}
					if ballots {
						var b *string
						if ev.Ballot != "" {
							b = &ev.Ballot
						}
						row = append(row, b, latest)
					}
					return row, nil
				}))
				if err != nil {
					return fmt.Errorf("copy: %w", err)
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// copyCeiling measures COPY into a fresh, migrated ledger (all its
// indexes) with the given writers.
func (e *env) copyCeiling(ctx context.Context, n, chunk, writers int) (rate, pgCPU float64, err error) {
	what := fmt.Sprintf("copy%d", writers)
	_, pool, err := e.database(ctx, what)
	if err != nil {
		return 0, 0, err
	}
	defer pool.Close()
	var mu sync.Mutex
	conns := func(ctx context.Context) (*pgx.Conn, func(), error) {
		mu.Lock()
		defer mu.Unlock()
		c, err := pool.Acquire(ctx)
		if err != nil {
			return nil, nil, err
		}
		return c.Conn(), c.Release, nil
	}
	cpu0 := e.backendCPU(ctx, "tally_bench_"+e.run+"_"+what)
	rate, err = copyRows(ctx, conns, singleLoad, n, chunk, writers, 10)
	if err != nil {
		return 0, 0, err
	}
	// The backends stay in the pool: their CPU time is the COPY's.
	pgCPU = 1e6 * (e.backendCPU(ctx, "tally_bench_"+e.run+"_"+what) - cpu0) / float64(n)
	return rate, pgCPU, nil
}
