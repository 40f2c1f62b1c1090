package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// This file owns S and measureScaling, which also runs H (hotpoll.go):
// the figures the section "Scaling with cores" of BENCHMARKS.md predicts
// from. S is E in four shapes, one or two intakes times a projector with
// one or two workers, with the CPU time per vote of each part. It also
// holds cpuWindow, the CPU each part uses while tally loadtest sends,
// which loadShape follows for every end-to-end run.

// scalingShapes are S's shapes, in the order of their rows.
var scalingShapes = []struct {
	id               string
	intakes, workers int
}{{"S11", 1, 1}, {"S12", 1, 2}, {"S21", 2, 1}, {"S22", 2, 2}}

// loadtestConcurrency is S's tally loadtest --concurrency, E's: the votes
// under way at once, whatever the intakes.
const loadtestConcurrency = 32

// measureScaling: S11, S12, S21 and S22, then H1, H2 and H2A.
func measureScaling(ctx context.Context, e *env, sz sizes, t *table) error {
	load := loadAvg()
	runs := make([][]e2eResult, len(scalingShapes))
	for round := range sz.scalingRounds {
		order := []int{0, 1, 2, 3}
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, i := range order {
			r, err := e.scalingRun(ctx, i, round, sz.scalingFor)
			if err != nil {
				return fmt.Errorf("%s: %w", scalingShapes[i].id, err)
			}
			runs[i] = append(runs[i], r)
		}
	}
	for i, sh := range scalingShapes {
		rs := runs[i]
		var rates, p50s, p99s []string
		var sum float64
		var cpus []cpuPerVote
		for _, r := range rs {
			sum += r.rate
			rates, p50s, p99s = append(rates, thousands(r.rate)), append(p50s, fmt.Sprintf("%.0f", r.p50)), append(p99s, fmt.Sprintf("%.0f", r.p99))
			cpus = append(cpus, r.cpu)
		}
		t.add(fig{id: sh.id, what: fmt.Sprintf("scaling: end to end as E with %d intake(s) and a projector with %d worker(s); mean of %d round(s) of %s, the shapes alternating",
			sh.intakes, sh.workers, len(rs), sz.scalingFor),
			value: sum / float64(len(rs)), unit: "votes/s", load: load, command: rs[0].command,
			extra: fmt.Sprintf("rounds %s votes/s; accept-to-recorded p50 %s ms, p99 %s ms; %s",
				strings.Join(rates, ", "), strings.Join(p50s, ", "), strings.Join(p99s, ", "), poolCPU(cpus))})
	}
	return measureHotPoll(ctx, e, sz, t)
}

// scalingRun is one round of S's shape i: a fresh database and Redis
// prefix, the shape's intakes on free loopback ports, and tally loadtest
// against all of them for d.
func (e *env) scalingRun(ctx context.Context, i, round int, d time.Duration) (e2eResult, error) {
	s := scalingShapes[i]
	what := fmt.Sprintf("%s_%d", strings.ToLower(s.id), round)
	keys := e.prefix(strings.ReplaceAll(what, "_", ""))
	defer e.dropPrefix(context.WithoutCancel(ctx), keys.Prefix())
	ports, err := freePorts(s.intakes)
	if err != nil {
		return e2eResult{}, err
	}
	sh := shape{projector: []string{"--workers", itoa(s.workers)}}
	for _, p := range ports {
		sh.addrs = append(sh.addrs, "127.0.0.1:"+itoa(p))
	}
	fmt.Fprintf(os.Stderr, "bench: scaling: %s round %d (load %s)\n", s.id, round+1, loadAvg())
	return e.loadShape(ctx, what, sh, []string{"--redis-url", e.redisURL, "--stream-prefix", keys.Prefix()}, d, loadtestConcurrency)
}

// cpuPerVote is the CPU time per vote answered 202 of each part of a
// pipeline, in µs, over votes votes.
type cpuPerVote struct {
	votes                                       int64
	intakes, projector, postgres, redis, client float64
}

func (c cpuPerVote) total() float64 {
	return c.intakes + c.projector + c.postgres + c.redis + c.client
}

func (c cpuPerVote) String() string {
	if c.votes == 0 {
		return "CPU per vote: not measured (too short a sending)"
	}
	return fmt.Sprintf("CPU per vote: intake(s) %.1f µs, projector %.1f µs, PostgreSQL %.1f µs, Redis %.1f µs, loadtest %.1f µs; total %.1f µs (over %s votes)",
		c.intakes, c.projector, c.postgres, c.redis, c.client, c.total(), thousands(float64(c.votes)))
}

// poolCPU is the CPU per vote over the votes of every run of cs.
func poolCPU(cs []cpuPerVote) cpuPerVote {
	var p cpuPerVote
	for _, c := range cs {
		n := float64(c.votes)
		p.votes += c.votes
		p.intakes += n * c.intakes
		p.projector += n * c.projector
		p.postgres += n * c.postgres
		p.redis += n * c.redis
		p.client += n * c.client
	}
	if p.votes > 0 {
		n := float64(p.votes)
		p.intakes, p.projector, p.postgres, p.redis, p.client = p.intakes/n, p.projector/n, p.postgres/n, p.redis/n, p.client/n
	}
	return p
}

// progressLine is a progress line of tally loadtest: its phase and the
// votes answered 202 so far.
var progressLine = regexp.MustCompile(`^loadtest: (\w+)\s+[0-9.]+s\s+sent \d+\s+accepted (\d+)`)

// cpuMark is the votes answered 202 and the CPU time of each part at one
// progress line.
type cpuMark struct {
	accepted int64
	cpu      cpuSnap
}

// cpuWindow is what followCPU saw of one tally loadtest run: the CPU at the
// line that says the sending starts, and at each progress line (about a
// second apart) while it sends.
type cpuWindow struct {
	start   *cpuMark
	sending []cpuMark
}

// followCPU reads tally loadtest's stderr from r until it ends, copies
// every line but the progress to logFile, and takes the CPU of p's
// processes, of the backends connected to db, of Redis and of client
// (the loadtest) as cpuWindow says.
func (e *env) followCPU(ctx context.Context, r io.Reader, p *pipeline, db string, client int) cpuWindow {
	var w cpuWindow
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if m := progressLine.FindStringSubmatch(line); m != nil {
			if m[1] == "sending" {
				n, _ := strconv.ParseInt(m[2], 10, 64)
				w.sending = append(w.sending, cpuMark{accepted: n, cpu: e.pipelineCPU(ctx, p, db, client)})
			}
			continue
		}
		if strings.HasPrefix(line, "loadtest: polls ") {
			w.start = &cpuMark{cpu: e.pipelineCPU(ctx, p, db, client)}
		}
		fmt.Fprintln(logFile, line)
	}
	_, _ = io.Copy(io.Discard, r) // what a line too long for the scanner left
	return w
}

// perVote is the CPU per vote from the first progress line of the
// sending (past a second of warm-up) to the last; with fewer than three
// such lines, from the line that says the sending starts.
func (w cpuWindow) perVote() cpuPerVote {
	marks := w.sending
	if len(marks) < 3 && w.start != nil {
		marks = append([]cpuMark{*w.start}, marks...)
	}
	if len(marks) < 2 {
		return cpuPerVote{}
	}
	a, b := marks[0], marks[len(marks)-1]
	return b.cpu.perVote(a.cpu, b.accepted-a.accepted)
}
