// Command benchtool measures how fast the projector drains a preloaded
// stream, and its peak memory.
//
// For each run it creates a fresh database, migrates it with the tally
// binary, creates a few polls, preloads the stream under a unique prefix,
// starts `tally projector` with the run's batch size, and waits until the
// stream is empty and nothing is pending. It then stops the projector with
// SIGTERM, checks that the ledger holds every event and that rebuild finds
// no difference, and drops the database and the keys it created.
//
//	go build -o /tmp/tally . && go run ./projector/internal/benchtool -tally /tmp/tally
//
// -workers 1,2,3 -rounds 2 drains the large-batch stream once per worker
// count and round, alternating (1, 2, 3, 1, 2, 3), so that load from
// elsewhere on the machine falls on every setting alike; each row shows
// the one-minute load average when its run started.
//
// The rate is events applied per second from the first applied event to the
// last acknowledgement. Peak memory is the projector process's maximum
// resident set size as /usr/bin/time reports it (when installed), and its
// VmHWM read from /proc just before SIGTERM.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"tally/ledger"
	"tally/stream"
)

type run struct {
	batch   int
	events  int
	workers int // the projector's --workers; 0: not passed (its default)
}

type result struct {
	run
	preload   time.Duration
	startup   time.Duration // process start to the first applied event
	drain     time.Duration // first applied event to the last acknowledgement
	maxRSSKiB int64         // /usr/bin/time's "maximum resident set size" (0 without it)
	hwmKiB    int64         // VmHWM of /proc/PID/status just before SIGTERM
	load      string        // one-minute load average when the run started
}

func main() {
	var (
		tallyBin  = flag.String("tally", "", "path of the tally binary (default: go build it into a temporary directory)")
		adminURL  = flag.String("admin-url", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL URL of a database to create and drop the benchmark database from")
		redisURL  = flag.String("redis-url", "redis://127.0.0.1:6379/0", "Redis URL")
		dbName    = flag.String("database", "", "name of the benchmark database, dropped and created for every run (default: tally_bench_proj_ and a random suffix, so that two benchmarks at once do not drop each other's)")
		events    = flag.Int("events", 1_000_000, "events preloaded for the large-batch run")
		batch     = flag.Int("batch", 1000, "batch size of the large-batch run")
		events1   = flag.Int("events-batch1", 20_000, "events preloaded for the batch-size-1 run (0: skip it)")
		timeout   = flag.Duration("timeout", 15*time.Minute, "bound on the whole benchmark")
		polls     = flag.Int("polls", 10, "polls the events are spread over")
		batchWait = flag.Duration("batch-wait", 50*time.Millisecond, "the projector's --batch-wait")
		workers   = flag.String("workers", "", "comma-separated `LIST` of the projector's --workers for the large-batch run, alternated per round (empty: not passed)")
		rounds    = flag.Int("rounds", 1, "how often the large-batch run is repeated for each -workers value")
	)
	flag.Parse()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, *timeout)
	defer cancelT()

	if *dbName == "" {
		*dbName = "tally_bench_proj_" + strings.ToLower(rand.Text()[:8])
	}
	b := &bench{adminURL: *adminURL, redisURL: *redisURL, dbName: *dbName, polls: *polls, batchWait: *batchWait}
	if err := b.init(ctx, *tallyBin); err != nil {
		fail(err)
	}
	defer b.close()
	ws := []int{0}
	if *workers != "" {
		ws = ws[:0]
		for _, f := range strings.Split(*workers, ",") {
			w, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || w < 1 {
				fail(fmt.Errorf("-workers %q: want a comma-separated list of counts of at least 1", *workers))
			}
			ws = append(ws, w)
		}
	}
	var runs []run
	for range max(*rounds, 1) {
		for _, w := range ws {
			runs = append(runs, run{batch: *batch, events: *events, workers: w})
		}
	}
	if *events1 > 0 {
		runs = append(runs, run{batch: 1, events: *events1})
	}
	var results []result
	for _, r := range runs {
		load := loadAvg1()
		fmt.Fprintf(os.Stderr, "run: batch %d, workers %s, %d events, load %s\n", r.batch, workersText(r.workers), r.events, load)
		res, err := b.run(ctx, r)
		res.load = load
		if err != nil {
			fail(fmt.Errorf("batch %d: %w", r.batch, err))
		}
		results = append(results, res)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BATCH\tWORKERS\tEVENTS\tLOAD\tPRELOAD/S\tSTARTUP\tDRAIN\tAPPLIED/S\tMAX RSS (time)\tVmHWM")
	for _, r := range results {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%.0f\t%s\t%s\t%.0f\t%.1f MiB\t%.1f MiB\n", r.batch, workersText(r.workers), r.events, r.load,
			float64(r.events)/r.preload.Seconds(), r.startup.Round(time.Millisecond), r.drain.Round(time.Millisecond),
			float64(r.events)/r.drain.Seconds(), float64(r.maxRSSKiB)/1024, float64(r.hwmKiB)/1024)
	}
	tw.Flush()
}

func workersText(w int) string {
	if w == 0 {
		return "default"
	}
	return strconv.Itoa(w)
}

// loadAvg1 is the one-minute load average ("?" when unknown).
func loadAvg1() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "benchtool:", err)
	os.Exit(1)
}

type bench struct {
	adminURL, redisURL, dbName string
	polls                      int
	batchWait                  time.Duration
	tally                      string
	tmp                        string
	rdb                        *redis.Client
}

func (b *bench) init(ctx context.Context, tallyBin string) error {
	opt, err := redis.ParseURL(b.redisURL)
	if err != nil {
		return err
	}
	b.rdb = redis.NewClient(opt)
	if err := b.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	b.tally = tallyBin
	if b.tally == "" {
		if b.tmp, err = os.MkdirTemp("", "benchtool"); err != nil {
			return err
		}
		b.tally = filepath.Join(b.tmp, "tally")
		cmd := exec.CommandContext(ctx, "go", "build", "-o", b.tally, ".")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go build (run benchtool from the module root): %w", err)
		}
	}
	return nil
}

func (b *bench) close() {
	b.rdb.Close()
	if b.tmp != "" {
		os.RemoveAll(b.tmp)
	}
}

func (b *bench) dbURL() string {
	u := b.adminURL
	i := strings.LastIndex(u, "/")
	q := ""
	if j := strings.IndexByte(u[i:], '?'); j >= 0 {
		q = u[i+j:]
	}
	return u[:i+1] + b.dbName + q
}

func (b *bench) dropDB(ctx context.Context) error {
	admin, err := pgx.Connect(ctx, b.adminURL)
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{b.dbName}.Sanitize()+` WITH (FORCE)`)
	return err
}

func (b *bench) run(ctx context.Context, r run) (res result, err error) {
	res.run = r
	cleanup := context.WithoutCancel(ctx)
	if err := b.dropDB(ctx); err != nil {
		return res, fmt.Errorf("drop %s: %w", b.dbName, err)
	}
	defer func() {
		if e := b.dropDB(cleanup); e != nil && err == nil {
			err = fmt.Errorf("drop %s: %w", b.dbName, e)
		}
	}()
	migrate := exec.CommandContext(ctx, b.tally, "migrate", "up", "--database-url", b.dbURL(), "--log-format", "text")
	if out, err := migrate.CombinedOutput(); err != nil {
		return res, fmt.Errorf("migrate: %w\n%s", err, out)
	}
	pool, err := pgxpool.New(ctx, b.dbURL())
	if err != nil {
		return res, err
	}
	defer pool.Close()
	store, err := ledger.New(pool, ledger.Config{})
	if err != nil {
		return res, err
	}
	choices := []string{"a", "b", "c", "d"}
	for i := range b.polls {
		if err := store.CreatePoll(ctx, ledger.Poll{ID: fmt.Sprintf("poll%d", i), Title: "bench", OpensAt: time.Unix(0, 0), Choices: choices}); err != nil {
			return res, err
		}
	}

	prefix := "bench-" + rand.Text()[:12]
	keys, err := stream.NewKeys(prefix, 1)
	if err != nil {
		return res, err
	}
	defer b.rdb.Del(cleanup, keys.Stream(0), keys.DeadLetter(0))
	start := time.Now()
	if err := b.preload(ctx, keys, r.events, choices); err != nil {
		return res, err
	}
	res.preload = time.Since(start)

	args := []string{b.tally, "projector",
		"--database-url", b.dbURL(), "--redis-url", b.redisURL, "--stream-prefix", prefix,
		"--consumer", "bench", "--batch-size", strconv.Itoa(r.batch), "--batch-wait", b.batchWait.String(),
		"--log-level", "warn", "--log-format", "text"}
	if r.workers > 0 {
		args = append(args, "--workers", strconv.Itoa(r.workers))
	}
	// Under /usr/bin/time when it is there: the peak RSS of a child that
	// getrusage reports to a Go parent includes the parent's own memory
	// at fork time.
	timeOut := ""
	if _, err := os.Stat("/usr/bin/time"); err == nil {
		timeOut = filepath.Join(os.TempDir(), "benchtool-time-"+rand.Text()[:12])
		defer os.Remove(timeOut)
		args = append([]string{"/usr/bin/time", "-f", "%M", "-o", timeOut}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	started := time.Now()
	if err := cmd.Start(); err != nil {
		return res, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	pid := cmd.Process.Pid
	if timeOut != "" {
		pid = childOf(pid)
	}
	stop := func() error {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		select {
		case err := <-exited:
			return err
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(pid, syscall.SIGKILL)
			<-exited
			return errors.New("the projector did not stop within 30s of SIGTERM")
		}
	}

	var first time.Time
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			_ = stop()
			return res, ctx.Err()
		case err := <-exited:
			return res, fmt.Errorf("the projector exited early: %v", err)
		case <-tick.C:
		}
		n, err := b.rdb.XLen(ctx, keys.Stream(0)).Result()
		if err != nil {
			_ = stop()
			return res, err
		}
		if first.IsZero() && n < int64(r.events) {
			first = time.Now()
		}
		if n > 0 {
			continue
		}
		p, err := b.rdb.XPending(ctx, keys.Stream(0), stream.Group).Result()
		if err == nil && p.Count == 0 {
			break
		}
	}
	end := time.Now()
	res.startup, res.drain = first.Sub(started), end.Sub(first)
	res.hwmKiB = vmHWM(pid)
	if err := stop(); err != nil {
		return res, fmt.Errorf("projector exit: %w", err)
	}
	if timeOut != "" {
		out, _ := os.ReadFile(timeOut)
		res.maxRSSKiB, _ = strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	}

	var rows int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM poll_events`).Scan(&rows); err != nil {
		return res, err
	}
	if rows != int64(r.events) {
		return res, fmt.Errorf("the ledger holds %d events, want %d", rows, r.events)
	}
	rep, err := store.Rebuild(ctx, "")
	if err != nil {
		return res, err
	}
	if rep.Differing != 0 {
		return res, fmt.Errorf("rebuild finds %d differing tallies", rep.Differing)
	}
	if dl, _ := b.rdb.XLen(ctx, keys.DeadLetter(0)).Result(); dl != 0 {
		return res, fmt.Errorf("%d dead letters", dl)
	}
	return res, nil
}

// childOf returns the pid of the first child of pid, waiting for it to
// appear (pid itself when none does within 5s).
func childOf(pid int) int {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		dirs, _ := os.ReadDir("/proc")
		for _, d := range dirs {
			stat, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
			if err != nil {
				continue
			}
			// pid (comm) state ppid ...
			i := strings.LastIndexByte(string(stat), ')')
			if i < 0 {
				continue
			}
			f := strings.Fields(string(stat[i+1:]))
			if len(f) > 1 && f[1] == strconv.Itoa(pid) {
				child, _ := strconv.Atoi(d.Name())
				return child
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return pid
}

// vmHWM reads the peak resident set size of a running process, in KiB
// (0 when unknown).
func vmHWM(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// preload adds events with distinct principals, spread over the polls and
// choices, in pipelines of 10000.
func (b *bench) preload(ctx context.Context, keys stream.Keys, events int, choices []string) error {
	now := time.Now()
	const chunk = 10_000
	for start := 0; start < events; start += chunk {
		_, err := b.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for i := start; i < min(start+chunk, events); i++ {
				poll, choice := fmt.Sprintf("poll%d", i%b.polls), choices[(i/b.polls)%len(choices)]
				e := stream.Entry{
					PrincipalID: fmt.Sprintf("u%d", i), ClientEventID: "k1", PollID: poll, CandidateID: choice,
					Fingerprint: ledger.FingerprintHex(poll, choice), ReceivedAt: now,
				}
				pipe.XAdd(ctx, &redis.XAddArgs{Stream: keys.Stream(0), Values: e.Values()})
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("preload: %w", err)
		}
	}
	return nil
}
