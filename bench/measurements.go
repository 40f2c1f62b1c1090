package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// measurement is one name -only accepts; run measures and adds its rows
// to the table.
type measurement struct {
	name string
	run  func(context.Context, *env, sizes, *table) error
}

// long are the measurements a full run without -only leaves out (a short
// run runs them): they take longer than the rest of a run.
var long = map[string]bool{"growth": true}

// measurements are every measurement of a run, in the order they run and
// their rows print.
var measurements = []measurement{
	{"projector", measureProjector},
	{"kinds", measureKinds},
	{"naive", measureNaive},
	{"batch1", measureBatch1},
	{"copy", measureCopy},
	{"floor", measureFloor},
	{"tuned", measureTuned},
	{"intake", measureIntake},
	{"burst", measureBurst},
	{"e2e", measureEndToEnd},
	{"cluster", measureCluster},
	{"scaling", measureScaling},
	{"import", measureImport},
	{"rebuild", rebuildSingle.measure},
	{"rebuildranked", rebuildRanked.measure},
	{"rebuildlatest", rebuildLatest.measure},
	{"log", measureLog},
	{"live", measureLive},
	{"catalog", measureCatalog},
	{"growth", measureGrowth},
}

// measureProjector: P, MB and BL with the shipped settings, P1 with one
// worker.
func measureProjector(ctx context.Context, e *env, sz sizes, t *table) error {
	r, err := measureP(ctx, e, sz, t)
	if err != nil {
		return err
	}
	e.settle(ctx)
	load := loadAvg()
	r1, err := e.drainProjector(ctx, e.tally, "proj1", sz.projector, sz.projectorLimit, "--workers", "1")
	if err != nil {
		return err
	}
	if r1.events < sz.projector {
		return fmt.Errorf("the projector with one worker applied %d of %d events within %s", r1.events, sz.projector, sz.projectorLimit)
	}
	t.add(fig{id: "P1", what: "projector as P with one worker (one transaction in flight)",
		value: r1.rate(), unit: "events/s", load: load, command: r1.command, extra: r1.cpu()})
	t.add(fig{id: "BL", what: "disk: bytes per event of the ledger and its log after P (tables and indexes)",
		value: float64(r.bytes) / float64(r.events), unit: "B", load: load,
		extra:   fmt.Sprintf("of which the log's tables %.0f B", float64(r.logBytes)/float64(r.events)),
		command: "pg_total_relation_size of poll_events and poll_log_* after P"})
	return nil
}

// measureP: P, PPG and MB, the projector with the shipped settings.
func measureP(ctx context.Context, e *env, sz sizes, t *table) (drainResult, error) {
	load := loadAvg()
	r, err := e.drainProjector(ctx, e.tally, "proj", sz.projector, sz.projectorLimit)
	if err != nil {
		return r, err
	}
	if r.events < sz.projector {
		return r, fmt.Errorf("the projector applied %d of %d events within %s", r.events, sz.projector, sz.projectorLimit)
	}
	t.add(fig{id: "P", what: fmt.Sprintf("projector: %s preloaded events drained, batch 1000, 2 workers (shipped settings)", count(sz.projector)),
		value: r.rate(), unit: "events/s", load: load, command: r.command, extra: r.cpu() + "; " + r.wal()})
	t.add(fig{id: "PPG", what: "PostgreSQL's CPU per event in P (its backends), for P / U without the projector and Redis that share the cores",
		value: r.pgCPU, unit: "µs", load: load, command: "/proc/PID/stat of the database's backends, before and after P"})
	t.add(fig{id: "MB", what: fmt.Sprintf("memory: projector peak RSS draining a %s-entry backlog", count(sz.projector)),
		value: r.hwmMB, unit: "MB", load: load, command: "VmHWM of the process in P"})
	return r, nil
}

// measureNaive: A, the per-vote UPDATE a user without a ledger would run.
func measureNaive(ctx context.Context, e *env, sz sizes, t *table) error {
	load := loadAvg()
	v, err := e.naive(ctx, 8, sz.naiveMax, sz.naiveFor)
	if err != nil {
		return err
	}
	t.add(fig{id: "A", what: "(a) naive per-vote `UPDATE poll_results SET vote_count = vote_count + 1`, 8 clients",
		value: v, unit: "votes/s", load: load,
		command: fmt.Sprintf("bench -only naive  (8 connections, autocommit, at most %s votes or %s)", count(sz.naiveMax), sz.naiveFor)})
	return nil
}

// measureBatch1: B1, the projector applying one event per transaction.
func measureBatch1(ctx context.Context, e *env, sz sizes, t *table) error {
	load := loadAvg()
	r, err := e.drainProjector(ctx, e.tally, "b1", sz.batch1, sz.batch1Limit, "--batch-size", "1")
	if err != nil {
		return err
	}
	t.add(fig{id: "B1", what: fmt.Sprintf("(b) projector at batch 1, one event per transaction (%s events applied from a %s-event stream, at most %s)",
		count(r.events), count(sz.batch1), sz.batch1Limit),
		value: r.rate(), unit: "events/s", load: load, command: r.command, extra: r.cpu()})
	return nil
}

// measureCopy: C1 and C2, the COPY ceiling with one and two writers.
func measureCopy(ctx context.Context, e *env, sz sizes, t *table) error {
	for _, w := range []int{1, 2} {
		e.settle(ctx)
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
}

// measureIntake: I, IB and MI, intake and the bare handler under wrk.
func measureIntake(ctx context.Context, e *env, sz sizes, t *table) error {
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
	t.add(fig{id: "I", what: "intake: POST /v1/votes of one principal a day old, each new event id looked up in the ledger, under wrk (" + note + ")", value: in.reqs, unit: "req/s",
		extra: fmt.Sprintf("p50 %s, p99 %s; CPU per request: intake %.1f µs, Redis %.1f µs", ms(in.p50), ms(in.p99), in.serverCPU, in.redisCPU), load: load,
		command: in.command + "  (tally intake " + strings.Join(intakeFlags, " ") + ")"})
	t.add(fig{id: "IB", what: "bare net/http handler answering 202 to the same body (" + note + ")", value: bare.reqs, unit: "req/s",
		extra: fmt.Sprintf("p50 %s, p99 %s; CPU per request: server %.1f µs", ms(bare.p50), ms(bare.p99), bare.serverCPU), load: load,
		command: bare.command + "  (go -C bench run ./bareserver)"})
	t.add(fig{id: "MI", what: "memory: intake peak RSS under wrk load", value: hwm, unit: "MB", load: load, command: "VmHWM of the process in I"})
	return nil
}

// measureEndToEnd: E, MP and MIE, tally loadtest through intake and the
// projector.
func measureEndToEnd(ctx context.Context, e *env, sz sizes, t *table) error {
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
}

// measureImport: IM, tally import of a file.
func measureImport(ctx context.Context, e *env, sz sizes, t *table) error {
	load := loadAvg()
	var im []float64
	var cmd string
	// Several rounds: one import varied by a third from run to run here.
	for range sz.importRounds {
		v, c, err := e.importFile(ctx, e.tally, "import", sz.importEvents)
		if err != nil {
			return err
		}
		im, cmd = append(im, v), c
		e.settle(ctx) // drops the round's database, whose name the next round takes
	}
	rounds := func(vs []float64) string {
		var out []string
		for _, v := range vs {
			out = append(out, thousands(v))
		}
		return strings.Join(out, ", ")
	}
	t.add(fig{id: "IM", what: fmt.Sprintf("import: tally import of a %s-event file (median of %d round(s))", count(sz.importEvents), len(im)),
		value: medianFloat(im), unit: "events/s", extra: "rounds " + rounds(im) + " events/s", load: load, command: cmd})
	return nil
}

// medianFloat is the median of vs (the upper one of an even count).
func medianFloat(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	return s[len(s)/2]
}

// rebuildRow is a rebuild measured next to its plain aggregate
// (rebuildVsCount): rows id and id+"G".
type rebuildRow struct {
	only   string // its -only name
	id     string
	l      load
	plain  string
	events func(sizes) int
	// what is the rebuild's row, given its ledger's size and its runs;
	// plainWhat follows the aggregate's SQL; built how the ledger's
	// projection is made.
	what, plainWhat, built string
}

// The rebuild rows: R and RG (Store.Rebuild next to a plain GROUP BY), RK
// and RKG of ranked ballots, RL and RLG of single choices of answers
// latest, 30% of the ballots changes (the rebuild counts each
// principal's last ballot in its poll's log, the aggregate its last by
// seq).
var (
	rebuildSingle = rebuildRow{only: "rebuild", id: "R", l: singleLoad, plain: plainCountSQL,
		events: func(sz sizes) int { return sz.rebuildEvents },
		what:   "rebuild: verify a %s-event ledger: recount and every poll's Merkle log hashed again (ledger.Store.Rebuild, as tally rebuild; median of %d warm runs)",
		built:  "unique indexes left off"}
	rebuildRanked = rebuildRow{only: "rebuildranked", id: "RK", l: rankedLoad, plain: plainBallotsSQL,
		events:    func(sz sizes) int { return sz.rankedRebuild },
		what:      "rebuild as R of a %s-ballot ledger of ranked polls (10 polls of 4 choices, each ballot ranking the 4): recount folded into Borda sums and pairwise cells, and the logs (median of %d warm runs)",
		plainWhat: " (each distinct ranking counted)", built: "unique indexes left off, projection by Store.Repair"}
	rebuildLatest = rebuildRow{only: "rebuildlatest", id: "RL", l: latestLoad, plain: plainLatestSQL,
		events:    func(sz sizes) int { return sz.rankedRebuild },
		what:      "rebuild as R of a %s-ballot ledger of polls of answers latest (10 polls of 4 choices, single choice, 30%% of the ballots a principal's second or third): each principal's last ballot in its poll's log counted, and the logs (median of %d warm runs)",
		plainWhat: " (each principal's last ballot by seq counted)", built: "unique indexes left off, projection by Store.Repair"}
)

func (row rebuildRow) measure(ctx context.Context, e *env, sz sizes, t *table) error {
	load := loadAvg()
	n := row.events(sz)
	r, err := e.rebuildVsCount(ctx, row.only, row.l, row.plain, n, sz.rebuildRounds)
	if err != nil {
		return err
	}
	t.add(fig{id: row.id, what: fmt.Sprintf(row.what, count(n), sz.rebuildRounds),
		value: r.rebuild.Seconds(), unit: "s", extra: "runs " + secs(r.rebuilds), load: load,
		command: fmt.Sprintf("bench -only %s  (ledger built with COPY in %s, %s)", row.only, r.build.Round(time.Second), row.built)})
	t.add(fig{id: row.id + "G", what: "plain `" + row.plain + "` over the same table" + row.plainWhat, value: r.plain.Seconds(), unit: "s",
		extra: "runs " + secs(r.plains), load: load, command: "bench -only " + row.only})
	return nil
}
