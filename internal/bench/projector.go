package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"tally/vote"

	"github.com/redis/go-redis/v9"

	"tally/ledger"
	"tally/stream"
)

// drainResult is one run of the projector against a preloaded stream.
type drainResult struct {
	events int           // events applied
	drain  time.Duration // first applied event to the last acknowledgement
	hwmMB  float64       // the projector's peak RSS
	// CPU time per event applied, in µs: the projector process and the
	// PostgreSQL backends it used.
	projCPU, pgCPU float64
	redisCPU       float64 // the whole Redis server's, per event
	command        string
}

func (r drainResult) rate() float64 { return float64(r.events) / r.drain.Seconds() }

func (r drainResult) cpu() string {
	return fmt.Sprintf("CPU per event: projector %.1f µs, PostgreSQL %.1f µs, Redis %.1f µs", r.projCPU, r.pgCPU, r.redisCPU)
}

// preload adds events 0..n-1 (see syntheticEvent) to the stream, in
// pipelines of 10000.
func (e *env) preload(ctx context.Context, keys stream.Keys, n, polls int) error {
	now := time.Now()
	const chunk = 10_000
	for start := 0; start < n; start += chunk {
		_, err := e.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for i := start; i < min(start+chunk, n); i++ {
				ev := syntheticEvent(i, polls, now)
				entry := stream.Entry{PrincipalID: ev.PrincipalID, ClientEventID: ev.ClientEventID, PollID: ev.PollID,
					CandidateID: ev.CandidateID, Fingerprint: vote.FingerprintHex(ev.PollID, ev.CandidateID), ReceivedAt: now}
				pipe.XAdd(ctx, &redis.XAddArgs{Stream: keys.Stream(0), Values: entry.Values()})
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("preload: %w", err)
		}
	}
	return nil
}

// drainProjector preloads n events, starts `tally projector` with extra
// flags, and waits until the stream is empty and nothing is pending, or
// until limit has passed since the first event was applied. It then checks
// the ledger against what was applied.
func (e *env) drainProjector(ctx context.Context, what string, n int, limit time.Duration, extra ...string) (drainResult, error) {
	var res drainResult
	url, pool, err := e.database(ctx, what)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	const polls = 10
	if err := createPolls(ctx, pool, polls); err != nil {
		return res, err
	}
	keys := e.prefix(what)
	defer e.dropPrefix(context.WithoutCancel(ctx), keys.Prefix())
	if err := e.preload(ctx, keys, n, polls); err != nil {
		return res, err
	}
	args := append([]string{e.tally, "projector", "--database-url", url, "--redis-url", e.redisURL,
		"--stream-prefix", keys.Prefix(), "--consumer", "bench", "--log-level", "warn", "--log-format", "text"}, extra...)
	res.command = fmt.Sprintf("tally projector %s  (stream preloaded with %d events)", joinArgs(extra), n)
	redis0 := e.redisCPU(ctx)
	p, err := start(ctx, logFile, args...)
	if err != nil {
		return res, err
	}
	var first time.Time
	var left int64
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			_ = p.stop()
			return res, ctx.Err()
		case err := <-p.exited:
			return res, fmt.Errorf("the projector exited early: %v", err)
		case <-tick.C:
		}
		left, err = e.rdb.XLen(ctx, keys.Stream(0)).Result()
		if err != nil {
			_ = p.stop()
			return res, err
		}
		if first.IsZero() && left < int64(n) {
			first = time.Now()
		}
		if !first.IsZero() && time.Since(first) > limit {
			break
		}
		if left > 0 {
			continue
		}
		if pend, err := e.rdb.XPending(ctx, keys.Stream(0), stream.Group).Result(); err == nil && pend.Count == 0 {
			break
		}
	}
	res.drain = time.Since(first)
	res.hwmMB = p.hwmMB()
	projCPU, pgCPU := cpuSeconds(p.cmd.Process.Pid), e.backendCPU(ctx, "tally_bench_"+e.run+"_"+what)
	redisCPU := e.redisCPU(ctx) - redis0
	if err := p.stop(); err != nil {
		return res, fmt.Errorf("projector: %w", err)
	}
	left, err = e.rdb.XLen(ctx, keys.Stream(0)).Result()
	if err != nil {
		return res, err
	}
	var rows int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM poll_events`).Scan(&rows); err != nil {
		return res, err
	}
	res.events = n - int(left)
	if res.events > 0 {
		res.projCPU, res.pgCPU = 1e6*projCPU/float64(res.events), 1e6*pgCPU/float64(res.events)
		res.redisCPU = 1e6 * redisCPU / float64(res.events)
	}
	if rows < int64(res.events) {
		return res, fmt.Errorf("the ledger holds %d events, but %d entries were acknowledged", rows, res.events)
	}
	store, err := ledger.New(pool, ledger.Config{})
	if err != nil {
		return res, err
	}
	rep, err := store.Rebuild(ctx, "")
	if err != nil {
		return res, err
	}
	if rep.Differing != 0 {
		return res, fmt.Errorf("rebuild finds %d tallies that differ from the ledger", rep.Differing)
	}
	if dl, _ := e.rdb.XLen(ctx, keys.DeadLetter(0)).Result(); dl != 0 {
		return res, fmt.Errorf("%d entries were dead-lettered", dl)
	}
	return res, nil
}

func joinArgs(args []string) string {
	s := ""
	for i, a := range args {
		if i > 0 {
			s += " "
		}
		s += a
	}
	if s == "" {
		return "(shipped settings)"
	}
	return s
}

func itoa(n int) string { return strconv.Itoa(n) }
