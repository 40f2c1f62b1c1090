package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"

	"tally/ledger"
	"tally/migrations"
	"tally/stream"
)

// env is what every measurement shares: the servers, the binaries, and the
// run's unique name, from which each database and Redis prefix is derived.
type env struct {
	adminURL string // a database to create and drop the run's databases from
	redisURL string
	tally    string // the tally binary
	bare     string // the bare 202 server binary
	syncSrv  string // the synchronous design's server binary (bench/syncserver)
	wrk      string // the wrk binary ("" when missing)
	lua      string // wrk's vote script
	run      string // unique per run
	rdb      *redis.Client
	tmp      string // scratch directory of the run
	// key signs the tokens of the run's principals; every intake the run
	// starts takes it, and so does tally loadtest.
	key *ownKeyIssuer

	mu       sync.Mutex
	dbs      []string
	prefixes []string
}

func newEnv(ctx context.Context, adminURL, redisURL, tally, bare, syncSrv, wrk string) (*env, error) {
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	rdb := redis.NewClient(opt)
	if err := rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("redis at %s does not answer: %w", redisURL, err)
	}
	tmp, err := os.MkdirTemp("", "tally-bench-")
	if err != nil {
		return nil, err
	}
	// A directory of its own: the burst writes its own key in tmp.
	keyDir, err := os.MkdirTemp(tmp, "key-")
	if err != nil {
		return nil, err
	}
	key, err := newOwnKeyIssuer(keyDir)
	if err != nil {
		return nil, err
	}
	return &env{
		adminURL: adminURL, redisURL: redisURL, tally: tally, bare: bare, syncSrv: syncSrv, wrk: wrk,
		run: "b" + strings.ToLower(rand.Text()[:8]), rdb: rdb, tmp: tmp, key: key,
	}, nil
}

// onServer is e with its databases on the PostgreSQL server at adminURL:
// the same Redis, binaries and run name. Its release drops what was
// created through it; e's close does not.
func (e *env) onServer(adminURL string) *env {
	return &env{adminURL: adminURL, redisURL: e.redisURL, tally: e.tally, bare: e.bare, syncSrv: e.syncSrv, wrk: e.wrk,
		lua: e.lua, run: e.run, rdb: e.rdb, tmp: e.tmp, key: e.key}
}

// close drops every database and deletes every Redis key the run created.
func (e *env) close(ctx context.Context) {
	e.release(ctx)
	e.rdb.Close()
	os.RemoveAll(e.tmp)
}

// release drops the databases and deletes the Redis keys created through e
// so far.
func (e *env) release(ctx context.Context) {
	e.mu.Lock()
	dbs, prefixes := e.dbs, e.prefixes
	e.dbs, e.prefixes = nil, nil
	e.mu.Unlock()
	for _, p := range prefixes {
		e.dropPrefix(ctx, p)
	}
	for _, db := range dbs {
		if err := e.dropDB(ctx, db); err != nil {
			fmt.Fprintf(os.Stderr, "bench: drop database %s: %v\n", db, err)
		}
	}
}

// settle readies the servers for the next measurement: it drops what the
// last one created (whose million-row tables autovacuum would otherwise
// vacuum during the next) and has PostgreSQL write its dirty buffers now
// (CHECKPOINT), not during the next measurement. A server that refuses
// the checkpoint (a role without pg_checkpoint) is left as it is.
func (e *env) settle(ctx context.Context) {
	e.release(ctx)
	conn, err := pgx.Connect(ctx, e.adminURL)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
		fmt.Fprintf(os.Stderr, "bench: CHECKPOINT before the next measurement: %v\n", err)
	}
}

// dbURL is adminURL with its database replaced by name, and
// sslmode=disable when adminURL has no query; for a keyword/value string
// ("host=... user=..."), adminURL with dbname=name added.
func (e *env) dbURL(name string) string {
	u, err := url.Parse(e.adminURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return e.adminURL + " dbname=" + name
	}
	u.Path, u.RawPath = "/"+name, ""
	if u.RawQuery == "" {
		u.RawQuery = "sslmode=disable"
	}
	return u.String()
}

func (e *env) dropDB(ctx context.Context, name string) error {
	admin, err := pgx.Connect(ctx, e.adminURL)
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`)
	return err
}

// database creates a fresh, migrated database for one measurement and
// returns its URL and a pool on it. close drops it.
func (e *env) database(ctx context.Context, what string) (string, *pgxpool.Pool, error) {
	name := "tally_bench_" + e.run + "_" + what
	admin, err := pgx.Connect(ctx, e.adminURL)
	if err != nil {
		return "", nil, fmt.Errorf("connect to %s: %w", e.adminURL, err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, fmt.Errorf("create database %s: %w", name, err)
	}
	e.mu.Lock()
	e.dbs = append(e.dbs, name)
	e.mu.Unlock()
	url := e.dbURL(name)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return "", nil, err
	}
	cfg.MaxConns = 16
	ledger.BufferedReads(&cfg.ConnConfig.Config) // as tally's commands open theirs
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return "", nil, err
	}
	sqlDB := stdlib.OpenDBFromPool(pool)
	defer sqlDB.Close()
	if err := migrations.Up(ctx, sqlDB); err != nil {
		pool.Close()
		return "", nil, fmt.Errorf("migrate %s: %w", name, err)
	}
	return url, pool, nil
}

// prefix returns a fresh stream prefix for one measurement; close deletes
// its keys.
func (e *env) prefix(what string) stream.Keys {
	p := e.run + what
	e.mu.Lock()
	e.prefixes = append(e.prefixes, p)
	e.mu.Unlock()
	keys, err := stream.NewKeys(p, 1)
	if err != nil {
		panic(err) // the prefix is made of [a-z0-9]
	}
	return keys
}

func (e *env) dropPrefix(ctx context.Context, p string) {
	iter := e.rdb.Scan(ctx, 0, "{"+p+":*", 10_000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 10_000 {
			e.rdb.Unlink(ctx, batch...)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		e.rdb.Unlink(ctx, batch...)
	}
}

var benchChoices = []string{"a", "b", "c", "d"}

// createPolls adds polls poll0..poll(n-1) of a single choice, open to
// anyone, with choices a-d.
func createPolls(ctx context.Context, pool *pgxpool.Pool, n int) error {
	return createLoadPolls(ctx, pool, n, singleLoad)
}

func pollID(i int) string { return "poll" + strconv.Itoa(i) }

// event i of a synthetic load: a first response of its own principal,
// spread over the polls and choices.
func syntheticEvent(i, polls int, now time.Time) ledger.Event {
	return ledger.Event{
		PrincipalID:   "u" + strconv.Itoa(i),
		ClientEventID: "k1",
		PollID:        pollID(i % polls),
		CandidateID:   benchChoices[(i/polls)%len(benchChoices)],
		ReceivedAt:    now,
	}
}
