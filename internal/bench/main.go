// Command bench measures tally end to end on one machine, next to the
// baselines a user would otherwise build, and prints a table of figures and
// ratios; with -out it also writes the table into a markdown file between
// the markers <!-- bench:begin --> and <!-- bench:end -->.
//
// Every measurement runs against the PostgreSQL and Redis it is given, on a
// database and a Redis prefix of its own, which it drops and deletes
// afterwards. Every load loop is bounded in count and in time, and all
// traffic goes to 127.0.0.1. scripts/bench.sh builds the binaries and runs
// it:
//
//	scripts/bench.sh            # the full run, writes BENCHMARKS.md
//	scripts/bench.sh --short    # small sizes, a check that it all runs
//
// -only runs some measurements: projector, batch1, naive, copy, intake,
// e2e, import, rebuild.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// logFile receives the output of the child processes.
var logFile = os.Stderr

// sizes are the counts and durations of one run.
type sizes struct {
	projector      int
	batch1         int
	batch1Limit    time.Duration
	naiveMax       int
	naiveFor       time.Duration
	copyRows       int
	wrkRounds      int
	wrkFor         time.Duration
	e2eFor         time.Duration
	importEvents   int
	rebuildEvents  int
	rebuildRounds  int
	projectorLimit time.Duration
}

var full = sizes{
	projector: 1_000_000, projectorLimit: 3 * time.Minute,
	batch1: 20_000, batch1Limit: 10 * time.Second,
	naiveMax: 1_000_000, naiveFor: 10 * time.Second,
	copyRows:  1_000_000,
	wrkRounds: 5, wrkFor: 8 * time.Second,
	e2eFor:        20 * time.Second,
	importEvents:  1_000_000,
	rebuildEvents: 10_000_000, rebuildRounds: 3,
}

var short = sizes{
	projector: 50_000, projectorLimit: 20 * time.Second,
	batch1: 2_000, batch1Limit: 2 * time.Second,
	naiveMax: 50_000, naiveFor: 2 * time.Second,
	copyRows:  50_000,
	wrkRounds: 1, wrkFor: 2 * time.Second,
	e2eFor:        3 * time.Second,
	importEvents:  50_000,
	rebuildEvents: 200_000, rebuildRounds: 1,
}

func main() {
	var (
		adminURL = flag.String("admin-url", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL `URL` of a database to create and drop the run's databases from")
		redisURL = flag.String("redis-url", "redis://127.0.0.1:6379/0", "Redis `URL`")
		tally    = flag.String("tally", "./tally", "the tally binary")
		bare     = flag.String("bare", "", "the bare 202 server binary (intake/internal/bareserver)")
		wrk      = flag.String("wrk", "wrk", "the wrk binary; empty skips the intake measurement")
		lua      = flag.String("lua", "intake/testdata/bench/post_vote.lua", "wrk's vote script")
		out      = flag.String("out", "", "markdown `FILE` to write the table into (between its bench markers)")
		only     = flag.String("only", "", "comma-separated measurements to run (default all)")
		isShort  = flag.Bool("short", false, "small sizes: a check that every measurement runs")
		timeout  = flag.Duration("timeout", 15*time.Minute, "bound on the whole run")
		logPath  = flag.String("log", "", "`FILE` for the output of the child processes (default stderr)")
	)
	flag.Parse()
	if *logPath != "" {
		f, err := os.Create(*logPath)
		if err != nil {
			fail(err)
		}
		defer f.Close()
		logFile = f
	}
	sz := full
	if *isShort {
		sz = short
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, *timeout)
	defer cancelT()

	e, err := newEnv(ctx, *adminURL, *redisURL, *tally, *bare, *wrk)
	if err != nil {
		fail(err)
	}
	e.lua = *lua
	defer e.close(context.WithoutCancel(ctx))

	want := map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		if s = strings.TrimSpace(s); s != "" {
			want[s] = true
		}
	}
	t := &table{loadStart: loadAvg3()}
	began := time.Now()
	failed := false
	for _, m := range measurements(e, sz) {
		if len(want) > 0 && !want[m.name] {
			continue
		}
		fmt.Fprintf(os.Stderr, "bench: %s (load %s)\n", m.name, loadAvg())
		t0 := time.Now()
		if err := m.run(ctx, t); err != nil {
			failed = true
			fmt.Fprintf(os.Stderr, "bench: %s failed: %v\n", m.name, err)
			t.fail(m.name, err)
			if ctx.Err() != nil {
				break
			}
		}
		fmt.Fprintf(os.Stderr, "bench: %s took %s\n", m.name, time.Since(t0).Round(100*time.Millisecond))
	}
	t.took = time.Since(began)
	t.short = *isShort
	t.versions = e.versions(context.WithoutCancel(ctx))
	t.loadEnd = loadAvg3()
	md := t.markdown()
	fmt.Println(md)
	if *out != "" {
		if err := writeBetweenMarkers(*out, md); err != nil {
			fail(err)
		}
		fmt.Fprintf(os.Stderr, "bench: wrote %s\n", *out)
	}
	if failed {
		e.close(context.WithoutCancel(ctx))
		os.Exit(1)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(2)
}

type measurement struct {
	name string
	run  func(context.Context, *table) error
}

func measurements(e *env, sz sizes) []measurement {
	return []measurement{
		{"projector", func(ctx context.Context, t *table) error {
			load := loadAvg()
			r, err := e.drainProjector(ctx, "proj", sz.projector, sz.projectorLimit)
			if err != nil {
				return err
			}
			if r.events < sz.projector {
				return fmt.Errorf("the projector applied %d of %d events within %s", r.events, sz.projector, sz.projectorLimit)
			}
			t.add(fig{id: "P", what: fmt.Sprintf("projector: %s preloaded events drained, batch 1000, 2 workers (shipped settings)", count(sz.projector)),
				value: r.rate(), unit: "events/s", load: load, command: r.command, extra: r.cpu()})
			t.add(fig{id: "MB", what: fmt.Sprintf("memory: projector peak RSS draining a %s-entry backlog", count(sz.projector)),
				value: r.hwmMB, unit: "MB", load: load, command: "VmHWM of the process in P"})
			load = loadAvg()
			r1, err := e.drainProjector(ctx, "proj1", sz.projector, sz.projectorLimit, "--workers", "1")
			if err != nil {
				return err
			}
			if r1.events < sz.projector {
				return fmt.Errorf("the projector with one worker applied %d of %d events within %s", r1.events, sz.projector, sz.projectorLimit)
			}
			t.add(fig{id: "P1", what: "projector as P with one worker (one transaction in flight)",
				value: r1.rate(), unit: "events/s", load: load, command: r1.command, extra: r1.cpu()})
			return nil
		}},
		{"naive", func(ctx context.Context, t *table) error {
			load := loadAvg()
			v, err := e.naive(ctx, 8, sz.naiveMax, sz.naiveFor)
			if err != nil {
				return err
			}
			t.add(fig{id: "A", what: "(a) naive per-vote `UPDATE poll_results SET vote_count = vote_count + 1`, 8 clients",
				value: v, unit: "votes/s", load: load,
				command: fmt.Sprintf("bench -only naive  (8 connections, autocommit, at most %s votes or %s)", count(sz.naiveMax), sz.naiveFor)})
			return nil
		}},
		{"batch1", func(ctx context.Context, t *table) error {
			load := loadAvg()
			r, err := e.drainProjector(ctx, "b1", sz.batch1, sz.batch1Limit, "--batch-size", "1")
			if err != nil {
				return err
			}
			t.add(fig{id: "B", what: fmt.Sprintf("(b) projector at batch 1, one event per transaction (%s events applied from a %s-event stream, at most %s)",
				count(r.events), count(sz.batch1), sz.batch1Limit),
				value: r.rate(), unit: "events/s", load: load, command: r.command, extra: r.cpu()})
			return nil
		}},
		{"copy", func(ctx context.Context, t *table) error {
			for _, w := range []int{1, 2} {
				load := loadAvg()
				v, cpu, err := e.copyCeiling(ctx, sz.copyRows, 10_000, w)
				if err != nil {
					return err
				}
				t.add(fig{id: fmt.Sprintf("C%d", w), what: fmt.Sprintf("(c) raw COPY into poll_events with its indexes, %d writer(s), %s rows in COPYs of 10k", w, count(sz.copyRows)),
					value: v, unit: "rows/s", load: load, extra: fmt.Sprintf("CPU per row: PostgreSQL %.1f µs", cpu),
					command: "bench -only copy  (pgx CopyFrom, same ids as P, each COPY its own transaction)"})
			}
			return nil
		}},
		{"intake", func(ctx context.Context, t *table) error {
			if e.wrk == "" {
				t.skip("intake", "wrk is not installed: install it (apt-get install -y wrk) and run again")
				return nil
			}
			load := loadAvg()
			in, bare, hwm, err := e.intakeVsBare(ctx, sz.wrkRounds, sz.wrkFor)
			if err != nil {
				return err
			}
			note := fmt.Sprintf("median of %d alternating rounds", sz.wrkRounds)
			t.add(fig{id: "I", what: "intake: POST /v1/votes under wrk (" + note + ")", value: in.reqs, unit: "req/s",
				extra: fmt.Sprintf("p50 %s, p99 %s; CPU per request: intake %.1f µs, Redis %.1f µs", ms(in.p50), ms(in.p99), in.serverCPU, in.redisCPU), load: load,
				command: in.command + "  (tally intake " + strings.Join(intakeFlags, " ") + ")"})
			t.add(fig{id: "IB", what: "bare net/http handler answering 202 to the same body (" + note + ")", value: bare.reqs, unit: "req/s",
				extra: fmt.Sprintf("p50 %s, p99 %s; CPU per request: server %.1f µs", ms(bare.p50), ms(bare.p99), bare.serverCPU), load: load,
				command: bare.command + "  (go run ./intake/internal/bareserver)"})
			t.add(fig{id: "MI", what: "memory: intake peak RSS under wrk load", value: hwm, unit: "MB", load: load, command: "VmHWM of the process in I"})
			return nil
		}},
		{"e2e", func(ctx context.Context, t *table) error {
			load := loadAvg()
			r, err := e.endToEnd(ctx, sz.e2eFor, 32)
			if err != nil {
				return err
			}
			t.add(fig{id: "E", what: fmt.Sprintf("end to end: votes accepted by intake and recorded by the projector, sustained for %s", sz.e2eFor),
				value: r.rate, unit: "votes/s", extra: fmt.Sprintf("accept-to-recorded p50 %.0f ms, p99 %.0f ms", r.p50, r.p99),
				load: load, command: r.command})
			t.add(fig{id: "MP", what: "memory: projector peak RSS under load (E)", value: r.projHWM, unit: "MB", load: load, command: "VmHWM of the projector in E"})
			t.add(fig{id: "MIE", what: "memory: intake peak RSS under load (E)", value: r.intakeHWM, unit: "MB", load: load, command: "VmHWM of intake in E"})
			return nil
		}},
		{"import", func(ctx context.Context, t *table) error {
			load := loadAvg()
			v, cmd, err := e.importFile(ctx, sz.importEvents)
			if err != nil {
				return err
			}
			t.add(fig{id: "IM", what: fmt.Sprintf("import: tally import of a %s-event file", count(sz.importEvents)),
				value: v, unit: "events/s", load: load, command: cmd})
			return nil
		}},
		{"rebuild", func(ctx context.Context, t *table) error {
			load := loadAvg()
			r, err := e.rebuildVsCount(ctx, sz.rebuildEvents, sz.rebuildRounds)
			if err != nil {
				return err
			}
			t.add(fig{id: "R", what: fmt.Sprintf("rebuild: verify a %s-event ledger (ledger.Store.Rebuild, as tally rebuild; median of %d warm runs)", count(sz.rebuildEvents), sz.rebuildRounds),
				value: r.rebuild.Seconds(), unit: "s", extra: "runs " + secs(r.rebuilds), load: load,
				command: fmt.Sprintf("bench -only rebuild  (ledger built with COPY in %s, unique indexes left off)", r.build.Round(time.Second))})
			t.add(fig{id: "RG", what: "plain `" + plainCountSQL + "` over the same table", value: r.plain.Seconds(), unit: "s",
				extra: "runs " + secs(r.plains), load: load, command: "bench -only rebuild"})
			return nil
		}},
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

func secs(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, fmt.Sprintf("%.2f", d.Seconds()))
	}
	return strings.Join(s, ", ") + " s"
}

func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return itoa(n)
}

func machine() string {
	return fmt.Sprintf("%d CPUs, %s, %s/%s", runtime.NumCPU(), memTotal(), runtime.GOOS, runtime.GOARCH)
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "? memory"
	}
	var kb float64
	fmt.Sscanf(strings.TrimPrefix(strings.SplitN(string(b), "\n", 2)[0], "MemTotal:"), "%f", &kb)
	return fmt.Sprintf("%.0f GiB", kb/1024/1024)
}
