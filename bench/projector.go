package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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
	bytes          int64   // on disk: the ledger and its log, with their indexes
	indexBytes     int64   // of bytes, their indexes
	logBytes       int64   // of bytes, the log's tables (poll_log_*)
	// walBytes is the WAL the whole server wrote from the projector's
	// start to the drained stream.
	walBytes int64
	command  string
}

func (r drainResult) rate() float64 { return float64(r.events) / r.drain.Seconds() }

// wal is the WAL written per event applied.
func (r drainResult) wal() string {
	return fmt.Sprintf("WAL per event %.0f B (the whole server's)", float64(r.walBytes)/float64(max(r.events, 1)))
}

func (r drainResult) cpu() string {
	return fmt.Sprintf("CPU per event: projector %.1f µs, PostgreSQL %.1f µs, Redis %.1f µs", r.projCPU, r.pgCPU, r.redisCPU)
}

// preload adds events 0..n-1 of l to the stream, in pipelines of 10000,
// each with the fingerprint of its canonical ballot.
func (e *env) preload(ctx context.Context, keys stream.Keys, l load, n, polls int) error {
	now := time.Now()
	const chunk = 10_000
	for start := 0; start < n; start += chunk {
		_, err := e.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for i := start; i < min(start+chunk, n); i++ {
				ev := l.event(i, polls, now)
				ev.ReceivedAt = now
				pipe.XAdd(ctx, &redis.XAddArgs{Stream: keys.Stream(0), Values: stream.Values(ev)})
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("preload: %w", err)
		}
	}
	return nil
}

// drainProjector is drainLoad of singleLoad.
func (e *env) drainProjector(ctx context.Context, bin, what string, n int, limit time.Duration, extra ...string) (drainResult, error) {
	return e.drainLoad(ctx, singleLoad, bin, what, n, limit, extra...)
}

// drainLoad preloads n events of l, starts `tally projector` with extra
// flags, and waits until the stream is empty and nothing is pending, or
// until limit has passed since the first event was applied. It then checks
// the ledger against what was applied, and for a load of another kind
// than single (or with changes) the projection's figures against the
// load's when every event was applied.
func (e *env) drainLoad(ctx context.Context, l load, bin, what string, n int, limit time.Duration, extra ...string) (drainResult, error) {
	var res drainResult
	url, pool, err := e.database(ctx, what)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	const polls = 10
	if err := createLoadPolls(ctx, pool, polls, l); err != nil {
		return res, err
	}
	keys := e.prefix(what)
	defer e.dropPrefix(context.WithoutCancel(ctx), keys.Prefix())
	if err := e.preload(ctx, keys, l, n, polls); err != nil {
		return res, err
	}
	args := append([]string{bin, "projector", "--allow-superuser", "--database-url", url, "--redis-url", e.redisURL,
		"--stream-prefix", keys.Prefix(), "--consumer", "bench", "--log-level", "warn", "--log-format", "text"}, extra...)
	res.command = fmt.Sprintf("tally projector %s  (stream preloaded with %d events)", joinArgs(extra), n)
	redis0 := e.redisCPU(ctx)
	wal0, err := e.walLSN(ctx)
	if err != nil {
		return res, err
	}
	p, err := start(ctx, logFile, args...)
	if err != nil {
		return res, err
	}
	first, err := e.waitDrained(ctx, p, keys, n, limit)
	if err != nil {
		return res, err
	}
	res.drain = time.Since(first)
	res.hwmMB = p.hwmMB()
	projCPU, pgCPU := cpuSeconds(p.cmd.Process.Pid), e.backendCPU(ctx, "tally_bench_"+e.run+"_"+what)
	redisCPU := e.redisCPU(ctx) - redis0
	wal1, err := e.walLSN(ctx)
	if err != nil {
		_ = p.stop()
		return res, err
	}
	res.walBytes = wal1 - wal0
	if err := p.stop(); err != nil {
		return res, fmt.Errorf("projector: %w", err)
	}
	left, err := e.rdb.XLen(ctx, keys.Stream(0)).Result()
	if err != nil {
		return res, err
	}
	res.events = n - int(left)
	if res.bytes, res.indexBytes, res.logBytes, err = ledgerBytes(ctx, pool); err != nil {
		return res, err
	}
	if res.events > 0 {
		res.projCPU, res.pgCPU = 1e6*projCPU/float64(res.events), 1e6*pgCPU/float64(res.events)
		res.redisCPU = 1e6 * redisCPU / float64(res.events)
	}
	if err := e.checkDrained(ctx, pool, keys, res.events); err != nil {
		return res, err
	}
	if l.rules.IsDefault() || res.events < n {
		return res, nil
	}
	want, err := l.want(n, polls)
	if err != nil {
		return res, err
	}
	return res, checkFigures(ctx, pool, want)
}

// waitDrained polls, every 10ms, until the projector p has emptied the
// stream of its n events and holds none pending, or limit has passed
// since it applied the first; it returns when it applied the first. It
// stops p when it fails.
func (e *env) waitDrained(ctx context.Context, p *proc, keys stream.Keys, n int, limit time.Duration) (time.Time, error) {
	var first time.Time
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			_ = p.stop()
			return first, ctx.Err()
		case <-p.done:
			return first, fmt.Errorf("the projector exited early: %v", p.err)
		case <-tick.C:
		}
		left, err := e.rdb.XLen(ctx, keys.Stream(0)).Result()
		if err != nil {
			_ = p.stop()
			return first, err
		}
		if first.IsZero() && left < int64(n) {
			first = time.Now()
		}
		if !first.IsZero() && time.Since(first) > limit {
			return first, nil
		}
		if left > 0 {
			continue
		}
		if pend, err := e.rdb.XPending(ctx, keys.Stream(0), stream.Group).Result(); err == nil && pend.Count == 0 {
			return first, nil
		}
	}
}

// checkDrained checks the ledger after a drain: at least the events
// acknowledged are in it, rebuild finds every tally right, and nothing was
// dead-lettered.
func (e *env) checkDrained(ctx context.Context, pool *pgxpool.Pool, keys stream.Keys, acked int) error {
	var rows int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM poll_events`).Scan(&rows); err != nil {
		return err
	}
	if rows < int64(acked) {
		return fmt.Errorf("the ledger holds %d events, but %d entries were acknowledged", rows, acked)
	}
	store, err := ledger.New(pool, ledger.Config{})
	if err != nil {
		return err
	}
	rep, err := store.Rebuild(ctx, "")
	if err != nil {
		return err
	}
	if rep.Differing != 0 {
		return fmt.Errorf("rebuild finds %d tallies that differ from the ledger", rep.Differing)
	}
	if dl, _ := e.rdb.XLen(ctx, keys.DeadLetter(0)).Result(); dl != 0 {
		return fmt.Errorf("%d entries were dead-lettered", dl)
	}
	return nil
}

// ledgerBytes is what the ledger and its log take on disk, indexes
// included, and of that their indexes and the log's tables: the tables an
// append writes, but the projection.
func ledgerBytes(ctx context.Context, pool *pgxpool.Pool) (total, indexes, logTables int64, err error) {
	err = pool.QueryRow(ctx, `SELECT sum(pg_total_relation_size(c.oid))::bigint, sum(pg_indexes_size(c.oid))::bigint,
		  sum(pg_total_relation_size(c.oid)) FILTER (WHERE c.relname <> 'poll_events')::bigint FROM pg_class c
		WHERE c.relkind = 'r' AND c.relnamespace = 'public'::regnamespace
		  AND c.relname IN ('poll_events', 'poll_log_leaves', 'poll_log_tiles', 'poll_log_heads')`).Scan(&total, &indexes, &logTables)
	return total, indexes, logTables, err
}

// walLSN is the server's current WAL position, in bytes, asked over a
// connection of its own to the admin database.
func (e *env) walLSN(ctx context.Context) (int64, error) {
	conn, err := pgx.Connect(ctx, e.adminURL)
	if err != nil {
		return 0, fmt.Errorf("connect to %s: %w", e.adminURL, err)
	}
	defer conn.Close(ctx)
	var lsn int64
	if err := conn.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`).Scan(&lsn); err != nil {
		return 0, fmt.Errorf("read the WAL position: %w", err)
	}
	return lsn, nil
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
