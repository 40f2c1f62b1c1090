// Command bench measures tally end to end on one machine, next to the
// baselines a user would otherwise build, and prints a table of figures and
// ratios; with -out it also writes the table into a markdown file between
// the markers <!-- bench:begin --> and <!-- bench:end -->.
//
// Every measurement runs against the PostgreSQL and Redis it is given, on a
// database and a Redis prefix of its own, which it drops and deletes
// afterwards. Every load loop is bounded in count and in time, and all
// traffic goes to 127.0.0.1. The daemons log in as -admin-url's role,
// which made the databases, so they run with --allow-superuser: the role's
// privileges change nothing measured. scripts/bench.sh builds the binaries
// and runs it:
//
//	scripts/bench.sh            # the full run, writes BENCHMARKS.md
//	scripts/bench.sh --short    # small sizes, a check that it all runs
//
// -only runs some measurements: projector, kinds, batch1, naive, copy,
// floor, tuned, intake, burst, e2e, cluster, scaling, import, rebuild,
// rebuildranked, rebuildlatest, log, live, catalog, growth. A full run without -only
// leaves growth out (the 5M-event ledger takes about 17 minutes here); a
// short run runs every measurement.
//
// Files:
//
//   - main.go: the flags, the sizes of a full and a short run, and the run
//     itself: each measurement in turn, then the table;
//   - measurements.go: the list of measurements and the rows each adds
//     (ids, wording, units): what the table prints;
//   - projector.go: the projector draining a preloaded stream (P, P1, B1);
//   - kinds.go: the loads of ballots of other kinds than single, and P
//     again with each (P-multiple, P-score, P-ranked, P-latest);
//   - baselines.go: what a user would otherwise build: per-vote UPDATEs
//     (A) and raw COPY (C1, C2);
//   - floor.go: the schema's floor, a bare unnest INSERT (U);
//   - tuned.go: P, C1, C2 and U again on a private PostgreSQL with a
//     production configuration (PT, C1T, C2T, UT, BLT);
//   - intake.go: intake and the bare handler under wrk (I, IB), and the
//     loadtest through intake and projector (E);
//   - burst.go: the burst, distinct voters each voting once with a signed
//     credential intake never saw, through intake and the projector, next
//     to the bare handler and the synchronous design under the same burst
//     (B, BC, BX, BU, B-LC, B-OIDC, B-go, BB, BB-go, BS); burst_wrk.go: its
//     client, wrk with testdata/burst_vote.lua;
//   - cluster.go: E against a private Redis Cluster of three masters (EC);
//   - scaling.go: E with one or two intakes and projector workers, with
//     the CPU per vote of each part (S11 to S22);
//   - hotpoll.go: one hot poll's appends against a poll each (H1, H2,
//     H2A), which the scaling measurement runs;
//   - live.go: intake's cost of Server-Sent Events viewers under a flow
//     of votes (SSE, next to SSE0 without them): its rounds and result;
//     live_load.go: the votes and intake's CPU time; live_viewers.go: the
//     streams; live_stats.go: the viewers' latencies, gaps and updates;
//   - catalog.go: row C, the catalog at 100, 10,000 and 100,000 polls
//     (two intakes; start, memory, a change at one enforced at the
//     other, POST latency, votes while polls are created, bulk creation:
//     CS, CM, CMX, CE, CP, CV0, CV, CB, CBC, CMP, CME, CMR, CN, C503);
//     catalog_fill.go fills it, catalog_changes.go makes the changes,
//     catalog_client.go is its HTTP client;
//   - growth.go: row G, the growth of the ledger to 5M events: the
//     projector's drain into an empty and a full ledger, rebuild, export
//     and audit, inclusion proofs and bytes per event (G-start, G-end,
//     G-rebuild, G-export, G-audit, G-proof, G-disk);
//   - ledger.go: tally import (IM) and rebuild next to a plain GROUP BY
//     (R, RG; of ranked ballots RK, RKG; of answers latest RL, RLG);
//   - env.go: the run's servers, its databases and Redis prefixes, and the
//     synthetic events every measurement shares;
//   - proc.go: the child processes (start, health, stop, peak memory);
//   - host.go: CPU time, load and versions of the machine and servers;
//   - table.go: figures, ratios and their markdown, written between the
//     markers of BENCHMARKS.md.
//
// Beside it, in this module: bareserver and syncserver, the baselines'
// servers; testdata/post_vote.lua, wrk's vote script (one principal);
// testdata/burst_vote.lua, the burst's (each vote of a file once); compare.sh, intake
// against the bare handler (and another revision of intake) under wrk.
//
// The bench is a module of its own (go.mod), so that the product's go.mod
// lists only what the product needs; its replace builds it against the
// tally of the same checkout. It runs the tally binary it is given and
// imports tally's public packages, and two of tally's internal ones that
// tally's tests use too (pgbin, procstat), which Go allows because the
// bench's module path lies under tally's.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
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
	importRounds   int
	rebuildEvents  int
	rebuildRounds  int
	projectorLimit time.Duration
	// kinds: the backlog of each of P-multiple, P-score, P-ranked and
	// P-latest (P's in a full run); rankedRebuild: RK's and RL's ledgers.
	kinds         int
	rankedRebuild int
	logLeaves     int // PR and AV: the leaves of one poll's log
	proofs        int // PR: inclusion proofs timed
	// clusterReplicas: replicas of each of EC's three masters.
	clusterReplicas int
	// liveViewers, liveRate, liveFor and liveRounds: SSE's streams, the
	// votes a second, how long they flow in each round of SSE0 and SSE,
	// and the rounds of each, alternating.
	liveViewers int
	liveRate    float64
	liveFor     time.Duration
	liveRounds  int
	// scalingFor and scalingRounds: each round of each shape of S, and
	// the rounds; hotEvents and hotFor bound each run of H.
	scalingFor    time.Duration
	scalingRounds int
	hotEvents     int
	hotFor        time.Duration
	// burstVoters, burstRounds and burstFor: B's principals in each
	// round (each votes once), the rounds of each target, alternating,
	// and the bound on one target's burst and on its counting.
	burstVoters int
	burstRounds int
	burstFor    time.Duration
	// catalogPolls are the sizes of row C (polls open to any principal;
	// each size also has 10 eligibility lists of as many principals, and
	// as many revoked principals); catalogChanges the changes timed from
	// A to B, catalogSteady the changes before B's memory is read again,
	// catalogVoteFor each round of votes with or without creations,
	// catalogRounds the rounds of each, alternating, and
	// catalogVoteBudget the time after which no pair of them starts;
	// catalogReady the bound on an intake's start, and catalogSettle the
	// wait after it before its memory is read.
	catalogPolls      []int
	catalogChanges    int
	catalogSteady     int
	catalogVoteFor    time.Duration
	catalogRounds     int
	catalogVoteBudget time.Duration
	catalogReady      time.Duration
	catalogSettle     time.Duration
	// growthEvents and growthDrain: row G's ledger, and the events of
	// each of its drains through the projector; long says whether a run
	// without -only runs the long measurements (growth).
	growthEvents int
	growthDrain  int
	long         bool
}

var full = sizes{
	projector: 1_000_000, projectorLimit: 3 * time.Minute,
	kinds: 1_000_000, rankedRebuild: 500_000,
	batch1: 20_000, batch1Limit: 10 * time.Second,
	naiveMax: 1_000_000, naiveFor: 10 * time.Second,
	copyRows:  1_000_000,
	wrkRounds: 5, wrkFor: 8 * time.Second,
	e2eFor:       20 * time.Second,
	importEvents: 1_000_000, importRounds: 3,
	rebuildEvents: 2_000_000, rebuildRounds: 5,
	logLeaves: 1_000_000, proofs: 2_000,
	clusterReplicas: 1,
	liveViewers:     1_000, liveRate: 500, liveFor: 5 * time.Second, liveRounds: 2,
	scalingFor: 8 * time.Second, scalingRounds: 2, hotEvents: 300_000, hotFor: 10 * time.Second,
	burstVoters: 20_000, burstRounds: 3, burstFor: 90 * time.Second,
	catalogPolls: []int{100, 10_000, 100_000}, catalogChanges: 200, catalogSteady: 1_000,
	catalogVoteFor: 3 * time.Second, catalogRounds: 7, catalogVoteBudget: 75 * time.Second,
	catalogReady: 5 * time.Minute, catalogSettle: time.Second,
	growthEvents: 5_000_000, growthDrain: 500_000,
}

var short = sizes{
	projector: 50_000, projectorLimit: 20 * time.Second,
	kinds: 10_000, rankedRebuild: 20_000,
	batch1: 2_000, batch1Limit: 2 * time.Second,
	naiveMax: 50_000, naiveFor: 2 * time.Second,
	copyRows:  50_000,
	wrkRounds: 1, wrkFor: 2 * time.Second,
	e2eFor:       3 * time.Second,
	importEvents: 50_000, importRounds: 1,
	rebuildEvents: 200_000, rebuildRounds: 1,
	logLeaves: 50_000, proofs: 200,
	clusterReplicas: 0,
	liveViewers:     100, liveRate: 200, liveFor: 2 * time.Second, liveRounds: 1,
	scalingFor: time.Second, scalingRounds: 1, hotEvents: 10_000, hotFor: time.Second,
	burstVoters: 300, burstRounds: 1, burstFor: 20 * time.Second,
	catalogPolls: []int{20, 200}, catalogChanges: 6, catalogSteady: 20,
	catalogVoteFor: 300 * time.Millisecond, catalogRounds: 2, catalogVoteBudget: 5 * time.Second,
	catalogReady: time.Minute, catalogSettle: 0,
	growthEvents: 20_000, growthDrain: 2_000, long: true,
}

// options are the command's flags.
type options struct {
	adminURL, redisURL string
	tally, bare, wrk   string
	syncSrv            string
	lua                string
	out                string
	only               map[string]bool // empty: every measurement
	short              bool
	catalogPolls       []int // row C's sizes, when given
	timeout            time.Duration
	logPath            string
}

func parseFlags() options {
	var o options
	flag.StringVar(&o.adminURL, "admin-url", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL `URL` of a database to create and drop the run's databases from")
	flag.StringVar(&o.redisURL, "redis-url", "redis://127.0.0.1:6379/0", "Redis `URL`")
	flag.StringVar(&o.tally, "tally", "./tally", "the tally binary")
	flag.StringVar(&o.bare, "bare", "", "the bare 202 server binary (bench/bareserver)")
	flag.StringVar(&o.syncSrv, "sync", "", "the synchronous design's server binary (bench/syncserver), for the burst")
	flag.StringVar(&o.wrk, "wrk", "wrk", "the wrk binary; empty skips the intake measurement")
	flag.StringVar(&o.lua, "lua", "bench/testdata/post_vote.lua", "wrk's vote script")
	flag.StringVar(&o.out, "out", "", "markdown `FILE` to write the table into (between its bench markers)")
	only := flag.String("only", "", "comma-separated measurements to run (default all): projector, kinds, naive, batch1, copy, floor, tuned, intake, burst, e2e, cluster, scaling, import, rebuild, rebuildranked, rebuildlatest, log, live, catalog, growth (a full run runs growth only when named)")
	flag.BoolVar(&o.short, "short", false, "small sizes: a check that every measurement runs")
	catalogPolls := flag.String("catalog-polls", "", "comma-separated `SIZES` of row C, in polls, smallest first (default 100,10000,100000; -short 20,200)")
	flag.DurationVar(&o.timeout, "timeout", 30*time.Minute, "bound on the whole run")
	flag.StringVar(&o.logPath, "log", "", "`FILE` for the output of the child processes (default stderr)")
	flag.Parse()
	for _, n := range strings.Split(*catalogPolls, ",") {
		if n = strings.TrimSpace(n); n != "" {
			v, err := strconv.Atoi(n)
			if err != nil || v < 1 {
				fail(fmt.Errorf("-catalog-polls: %q is not a number of polls", n))
			}
			o.catalogPolls = append(o.catalogPolls, v)
		}
	}
	o.only = map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.only[s] = true
		}
	}
	return o
}

func main() {
	o := parseFlags()
	if o.logPath != "" {
		f, err := os.Create(o.logPath)
		if err != nil {
			fail(err)
		}
		defer f.Close()
		logFile = f
	}
	sz := full
	if o.short {
		sz = short
	}
	if len(o.catalogPolls) > 0 {
		sz.catalogPolls = o.catalogPolls
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, o.timeout)
	defer cancelT()

	e, err := newEnv(ctx, o.adminURL, o.redisURL, o.tally, o.bare, o.syncSrv, o.wrk)
	if err != nil {
		fail(err)
	}
	e.lua = o.lua
	defer e.close(context.WithoutCancel(ctx))

	t, failed := runMeasurements(ctx, e, sz, o.only)
	t.short = o.short
	t.versions = e.versions(context.WithoutCancel(ctx))
	t.loadEnd = loadAvg3()
	md := t.markdown()
	fmt.Println(md)
	if o.out != "" {
		if err := writeBetweenMarkers(o.out, md); err != nil {
			fail(err)
		}
		fmt.Fprintf(os.Stderr, "bench: wrote %s\n", o.out)
	}
	if failed {
		e.close(context.WithoutCancel(ctx))
		os.Exit(1)
	}
}

// runMeasurements runs the measurements only names (all when empty), in
// order, and reports whether any failed; a failed one is a line of the
// table, and the run goes on unless ctx has ended.
func runMeasurements(ctx context.Context, e *env, sz sizes, only map[string]bool) (*table, bool) {
	t := &table{loadStart: loadAvg3()}
	began := time.Now()
	failed := false
	for _, m := range measurements {
		if len(only) > 0 && !only[m.name] || len(only) == 0 && long[m.name] && !sz.long {
			continue
		}
		fmt.Fprintf(os.Stderr, "bench: %s (load %s)\n", m.name, loadAvg())
		t0 := time.Now()
		if err := m.run(ctx, e, sz, t); err != nil {
			failed = true
			fmt.Fprintf(os.Stderr, "bench: %s failed: %v\n", m.name, err)
			t.fail(m.name, err)
			if ctx.Err() != nil {
				break
			}
		}
		fmt.Fprintf(os.Stderr, "bench: %s took %s\n", m.name, time.Since(t0).Round(100*time.Millisecond))
		e.settle(context.WithoutCancel(ctx))
	}
	t.took = time.Since(began)
	return t, failed
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(2)
}
