package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sethvargo/go-retry"

	"tally/stream"
)

// This file owns the burst's instruments: the load (sendBurst), when its
// votes are counted (waitStreamEmpty), and what PostgreSQL committed
// meanwhile (commitsQuiet, projectorBatches).

// burstRequests are the bodies and Authorization headers of n votes into
// poll: with l nil, one single choice of each token's principal; else
// request i is the ballot of l's event i (its principal's first, second or
// third), sent with that principal's token.
func burstRequests(tokens []string, poll string, n int, l *load) (bodies [][]byte, auths []string) {
	bodies, auths = make([][]byte, n), make([]string, n)
	for i := range n {
		if l == nil {
			bodies[i] = fmt.Appendf(nil, `{"event_id":"b-%d","poll_id":%q,"candidate_id":%q}`, i, poll, benchChoices[i%len(benchChoices)])
			auths[i] = "Bearer " + tokens[i]
			continue
		}
		p, nth := l.principalOf(i)
		bodies[i] = fmt.Appendf(nil, `{"event_id":"b-%d","poll_id":%q,"ballot":%s}`, i, poll, l.ballotJSON(p, nth))
		auths[i] = "Bearer " + tokens[p]
	}
	return bodies, auths
}

// sendBurst posts each body with its Authorization header, burstConcurrency
// at a time, for at most limit, into r (answered, latencies, the bench's
// own CPU time meanwhile: it is the client), and returns when the first
// request went. An answer other than want fails it.
func sendBurst(ctx context.Context, addr string, bodies [][]byte, auths []string, want int, limit time.Duration, r *burstRun) (time.Time, error) {
	cpu0 := cpuSeconds(os.Getpid())
	defer func() { r.clientCPU = cpuSeconds(os.Getpid()) - cpu0 }()
	tr := &http.Transport{MaxIdleConnsPerHost: burstConcurrency, MaxConnsPerHost: burstConcurrency}
	client := &http.Client{Timeout: 10 * time.Second, Transport: tr}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	lat := make([]time.Duration, len(bodies))
	var (
		next     atomic.Int64
		done     atomic.Int64
		last     atomic.Int64 // ns since start of the latest answer
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	for range burstConcurrency {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(bodies) {
					return
				}
				t0 := time.Now()
				code, err := postBurstVote(ctx, client, addr, bodies[i], auths[i])
				at := time.Since(start)
				if err == nil && code != want {
					err = fmt.Errorf("vote %d: answered %d, want %d", i, code, want)
				}
				if err != nil && ctx.Err() != nil {
					return // the limit passed, or another vote failed
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					cancel()
					return
				}
				lat[i] = time.Since(t0)
				done.Add(1)
				for {
					l := last.Load()
					if int64(at) <= l || last.CompareAndSwap(l, int64(at)) {
						break
					}
				}
			}
		})
	}
	wg.Wait()
	r.answered = time.Duration(last.Load())
	r.p50, r.p99 = quantile(lat, 0.5), quantile(lat, 0.99)
	switch {
	case firstErr != nil:
		return start, firstErr
	case done.Load() < int64(len(bodies)):
		return start, fmt.Errorf("%d of %d votes answered within %s", done.Load(), len(bodies), limit)
	}
	return start, nil
}

// postBurstVote posts body with the Authorization header auth and returns
// the status; the answer is read whole.
func postBurstVote(ctx context.Context, client *http.Client, addr string, body []byte, auth string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/votes", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", auth)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, err
}

// waitStreamEmpty waits, for at most limit after start, until the stream
// of keys holds no entry: the projector deletes an entry once the
// transaction that applied it committed, so the last vote is then in
// poll_results. It sets r.counted.
func (e *env) waitStreamEmpty(ctx context.Context, keys stream.Keys, start time.Time, limit time.Duration, r *burstRun) error {
	deadline := start.Add(limit)
	for {
		n, err := e.rdb.XLen(ctx, keys.Stream(0)).Result()
		if err != nil {
			return err
		}
		if n == 0 {
			r.counted = time.Since(start)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s votes still in the stream %s after the first request", thousands(float64(n)), limit)
		}
		if !sleepUntil(ctx, time.Now().Add(2*time.Millisecond)) {
			return ctx.Err()
		}
	}
}

// projectorBatches is the count of batches the projector serving metrics
// on addr applied (tally_projector_batch_size_count).
func projectorBatches(ctx context.Context, addr string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("the projector's metrics: %w", err)
	}
	defer resp.Body.Close()
	return metricValue(resp.Body, "tally_projector_batch_size_count")
}

// metricValue is the value of the sample named name, without labels, in
// Prometheus' text format; 0 when there is none.
func metricValue(r io.Reader, name string) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), name+" ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		return int64(f), nil
	}
	return 0, sc.Err()
}

// commitsQuiet is xact_commit of database db once no client is connected
// to it (a backend publishes its counts when it exits), waiting for that
// at most 15s. It asks from the admin database, whose commits are its own.
func (e *env) commitsQuiet(ctx context.Context, db string) (int64, error) {
	conn, err := pgx.Connect(ctx, e.adminURL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	left := 0
	err = retry.Do(ctx, retry.WithMaxDuration(15*time.Second, retry.NewConstant(20*time.Millisecond)), func(ctx context.Context) error {
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'`, db).Scan(&left); err != nil {
			return err
		}
		if left > 0 {
			return retry.RetryableError(errors.New("clients connected"))
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("%d clients still connected to %s after 15s: %w", left, db, err)
	}
	var n int64
	err = conn.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = $1`, db).Scan(&n)
	return n, err
}

// listeners is the count of backends connected to database db whose last
// statement was a LISTEN: they wait for notifications.
func (e *env) listeners(ctx context.Context, db string) (int64, error) {
	conn, err := pgx.Connect(ctx, e.adminURL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int64
	err = conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND state = 'idle' AND query ILIKE 'LISTEN %'`, db).Scan(&n)
	return n, err
}

// checkpoint has PostgreSQL write its dirty buffers now, not during the
// next burst; a server that refuses is left as it is (see settle).
func (e *env) checkpoint(ctx context.Context) {
	conn, err := pgx.Connect(ctx, e.adminURL)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, "CHECKPOINT")
}

// dbName is the database e.database names for what.
func (e *env) dbName(what string) string { return "tally_bench_" + e.run + "_" + what }
