package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
	wrk      string // the wrk binary ("" when missing)
	lua      string // wrk's vote script
	run      string // unique per run
	rdb      *redis.Client
	tmp      string // scratch directory of the run

	mu       sync.Mutex
	dbs      []string
	prefixes []string
}

func newEnv(ctx context.Context, adminURL, redisURL, tally, bare, wrk string) (*env, error) {
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
	return &env{
		adminURL: adminURL, redisURL: redisURL, tally: tally, bare: bare, wrk: wrk,
		run: "b" + strings.ToLower(rand.Text()[:8]), rdb: rdb, tmp: tmp,
	}, nil
}

// close drops every database and deletes every Redis key the run created.
func (e *env) close(ctx context.Context) {
	e.mu.Lock()
	dbs, prefixes := e.dbs, e.prefixes
	e.mu.Unlock()
	for _, p := range prefixes {
		e.dropPrefix(ctx, p)
	}
	for _, db := range dbs {
		if err := e.dropDB(ctx, db); err != nil {
			fmt.Fprintf(os.Stderr, "bench: drop database %s: %v\n", db, err)
		}
	}
	e.rdb.Close()
	os.RemoveAll(e.tmp)
}

// dbURL is adminURL with its database replaced by name.
func (e *env) dbURL(name string) string {
	u := e.adminURL
	q := ""
	if i := strings.IndexByte(u, '?'); i >= 0 {
		u, q = u[:i], u[i:]
	}
	if i := strings.LastIndexByte(u, '/'); i > len("postgres://") {
		u = u[:i]
	}
	if q == "" {
		q = "?sslmode=disable"
	}
	return u + "/" + name + q
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

// createPolls adds polls poll0..poll(n-1), open to anyone, with choices a-d.
func createPolls(ctx context.Context, pool *pgxpool.Pool, n int) error {
	store, err := ledger.New(pool, ledger.Config{})
	if err != nil {
		return err
	}
	for i := range n {
		if err := store.CreatePoll(ctx, ledger.Poll{ID: pollID(i), Title: "bench", OpensAt: time.Unix(0, 0), Choices: benchChoices}); err != nil {
			return err
		}
	}
	return nil
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

// proc is a child process whose peak memory is followed.
type proc struct {
	cmd    *exec.Cmd
	exited chan error
	args   []string
}

func start(ctx context.Context, logTo *os.File, args ...string) (*proc, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logTo, logTo
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, exited: make(chan error, 1), args: args}
	go func() { p.exited <- cmd.Wait() }()
	return p, nil
}

// hwmMB is the process's peak resident set size so far (VmHWM), in MB (10^6 bytes).
func (p *proc) hwmMB() float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return n * 1024 / 1e6
		}
	}
	return 0
}

// stop sends SIGTERM and waits; SIGKILL after 30s.
func (p *proc) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		return err
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return errors.New(p.args[0] + " did not stop within 30s of SIGTERM")
	}
}

// waitHealthy waits until the server p runs answers on addr.
func waitHealthy(ctx context.Context, p *proc, addr string) error {
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-p.exited:
			return fmt.Errorf("%s exited: %v", p.args[0], err)
		default:
		}
		if err := httpGet(ctx, "http://"+addr+"/healthz"); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer on %s within 15s", strings.Join(p.args[:2], " "), addr)
}

// loadAvg is the one-minute load average.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

// versions names the servers.
func (e *env) versions(ctx context.Context) string {
	pg, rd := "PostgreSQL ?", "Redis ?"
	if conn, err := pgx.Connect(ctx, e.adminURL); err == nil {
		var v string
		if conn.QueryRow(ctx, `SHOW server_version`).Scan(&v) == nil {
			pg = "PostgreSQL " + strings.Fields(v)[0]
		}
		conn.Close(ctx)
	}
	if info, err := e.rdb.Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				rd = "Redis " + v
			}
		}
	}
	return pg + ", " + rd
}

// cpuSeconds is the user and system CPU time pid has used, in seconds.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// backendCPU is the CPU time the PostgreSQL backends connected to
// database db have used, in seconds (0 when the server is not local). It
// asks over a connection of its own, to another database.
func (e *env) backendCPU(ctx context.Context, db string) float64 {
	conn, err := pgx.Connect(ctx, e.adminURL)
	if err != nil {
		return 0
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = $1`, db)
	if err != nil {
		return 0
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return 0
	}
	var sum float64
	for _, pid := range pids {
		sum += cpuSeconds(int(pid))
	}
	return sum
}

// loadAvg3 is the 1, 5 and 15-minute load averages.
func loadAvg3() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
