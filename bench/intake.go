package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"tally/ledger"
)

// wrkResult is what wrk reports for one run.
type wrkResult struct {
	reqs  float64
	total int64 // requests completed
	// CPU time per request, in µs: the server process, and Redis (the
	// whole server: other clients of a shared Redis count too).
	serverCPU, redisCPU float64
	p50, p99            time.Duration
	non202              int
	command             string
}

var (
	wrkRate    = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	wrkPct     = regexp.MustCompile(`(?m)^\s+(50|99)%\s+([0-9.]+)(us|ms|s)\s*$`)
	wrkRefused = regexp.MustCompile(`answers other than 202: (\d+)`)
	wrkErrors  = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	wrkTotal   = regexp.MustCompile(`(\d+) requests in`)
)

// runWrk runs wrk with the vote script against addr.
func (e *env) runWrk(ctx context.Context, addr, token, poll, runID string, threads, conns int, d time.Duration) (wrkResult, error) {
	script := e.lua
	args := []string{"-t" + itoa(threads), "-c" + itoa(conns), "-d" + d.String(), "--latency", "-s", script, "http://" + addr}
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.wrk, args...)
	cmd.Env = append(os.Environ(), "TALLY_TOKEN="+token, "TALLY_POLL="+poll, "TALLY_RUN="+runID)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk: %w\n%s", err, out)
	}
	var r wrkResult
	m := wrkRate.FindSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("wrk printed no Requests/sec:\n%s", out)
	}
	r.reqs, _ = strconv.ParseFloat(string(m[1]), 64)
	if m := wrkTotal.FindSubmatch(out); m != nil {
		r.total, _ = strconv.ParseInt(string(m[1]), 10, 64)
	}
	for _, m := range wrkPct.FindAllSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(string(m[2]), 64)
		unit := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second}[string(m[3])]
		d := time.Duration(v * float64(unit))
		if string(m[1]) == "50" {
			r.p50 = d
		} else {
			r.p99 = d
		}
	}
	if m := wrkRefused.FindSubmatch(out); m != nil {
		r.non202, _ = strconv.Atoi(string(m[1]))
	}
	if m := wrkErrors.FindSubmatch(out); m != nil {
		n, _ := strconv.Atoi(string(m[1]))
		r.non202 = max(r.non202, n)
	}
	r.command = "wrk " + strings.Join(args[:len(args)-3], " ") + " -s bench/testdata/post_vote.lua http://" + addr
	return r, nil
}

// intakeFlags lift intake's per-principal rate limit and backlog bound, so
// that one principal (wrk) or a thousand (loadtest) measure the path, not
// the limiter.
var intakeFlags = []string{"--rate", "1000000", "--burst", "1000000", "--max-backlog", "100000000", "--idempotency-window", "2m"}

// intakeVsBare runs wrk against tally intake and the bare handler, rounds
// times alternating, and returns the median round of each and intake's
// peak RSS.
func (e *env) intakeVsBare(ctx context.Context, rounds int, d time.Duration) (intake, bare wrkResult, intakeHWM float64, err error) {
	url, pool, err := e.database(ctx, "intake")
	if err != nil {
		return
	}
	defer pool.Close()
	token, err := e.benchPrincipal(ctx, pool)
	if err != nil {
		return
	}
	keys := e.prefix("intake")
	defer e.dropPrefix(context.WithoutCancel(ctx), keys.Prefix())
	const intakeAddr, bareAddr = "127.0.0.1:18190", "127.0.0.1:18191"
	ip, err := start(ctx, logFile, append([]string{e.tally, "intake", "--allow-superuser", "--listen", intakeAddr, "--database-url", url,
		"--redis-url", e.redisURL, "--stream-prefix", keys.Prefix(), "--log-level", "error", "--log-format", "text"},
		slices.Concat(intakeFlags, e.key.intakeFlags())...)...)
	if err != nil {
		return
	}
	defer ip.stop()
	bp, err := start(ctx, logFile, e.bare, "-listen", bareAddr)
	if err != nil {
		return
	}
	defer bp.stop()
	if err = waitHealthy(ctx, ip, intakeAddr); err != nil {
		return
	}
	if err = waitHealthy(ctx, bp, bareAddr); err != nil {
		return
	}
	targets := []wrkTarget{{"intake", intakeAddr, ip}, {"bare", bareAddr, bp}}
	var runs [2][]wrkResult
	for round := range rounds {
		for i, tg := range targets {
			var r wrkResult
			r, err = e.wrkRound(ctx, tg, token, fmt.Sprintf("%s-%d-%s", e.run, round, tg.name), d)
			if err != nil {
				return
			}
			runs[i] = append(runs[i], r)
		}
	}
	return medianRound(runs[0]), medianRound(runs[1]), ip.hwmMB(), nil
}

// benchPrincipal creates the one poll and the one principal wrk votes
// as, and returns the principal's token. The principal is made a day old,
// past intakeFlags' idempotency window, as a voter who has been around is
// in production: intake looks each new event id of it up in the ledger
// (its older records may have expired) and then runs the script.
func (e *env) benchPrincipal(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	if err := createPolls(ctx, pool, 1); err != nil {
		return "", err
	}
	store, err := ledger.New(pool, ledger.Config{})
	if err != nil {
		return "", err
	}
	ps, err := store.AddPrincipals(ctx, []string{"bench"}, "")
	if err != nil {
		return "", err
	}
	createdAt := ps[0].CreatedAt.Add(-24 * time.Hour)
	if _, err = pool.Exec(ctx, `UPDATE principals SET created_at = $2 WHERE id = $1`, ps[0].ID, createdAt); err != nil {
		return "", err
	}
	ps[0].CreatedAt = createdAt
	tokens, err := e.key.issue(ps, createdAt)
	if err != nil {
		return "", err
	}
	return tokens[0], nil
}

// wrkTarget is one server wrk runs against.
type wrkTarget struct {
	name   string // "intake" or "bare"
	addr   string
	server *proc
}

// wrkRound runs wrk against tg for d, and adds the CPU time per request
// the server and Redis used. A request answered other than 202 fails it.
func (e *env) wrkRound(ctx context.Context, tg wrkTarget, token, runID string, d time.Duration) (wrkResult, error) {
	cpu0, redis0 := cpuSeconds(tg.server.cmd.Process.Pid), e.redisCPU(ctx)
	r, err := e.runWrk(ctx, tg.addr, token, pollID(0), runID, 2, 64, d)
	if err != nil {
		return r, err
	}
	if r.total > 0 {
		r.serverCPU = 1e6 * (cpuSeconds(tg.server.cmd.Process.Pid) - cpu0) / float64(r.total)
		r.redisCPU = 1e6 * (e.redisCPU(ctx) - redis0) / float64(r.total)
	}
	if r.non202 > 0 {
		return r, fmt.Errorf("%s answered %d requests with another status than 202", tg.name, r.non202)
	}
	return r, nil
}

// medianRound is the round with the median request rate (the lower
// middle one of an even count).
func medianRound(rs []wrkResult) wrkResult {
	if len(rs) == 0 {
		return wrkResult{}
	}
	sorted := slices.Clone(rs)
	slices.SortFunc(sorted, func(a, b wrkResult) int { return cmp.Compare(a.reqs, b.reqs) })
	return sorted[(len(sorted)-1)/2]
}

// e2eResult is one tally loadtest run through intake and the projector.
type e2eResult struct {
	rate                float64 // accepted votes per second
	p50, p99            float64 // accept-to-recorded, ms
	intakeHWM, projHWM  float64
	recorded, attempted int64
	drain               float64 // s from the end of sending to an empty backlog
	// cpu is the CPU time per vote answered 202 of each part, over the
	// steady part of the sending (cpuWindow).
	cpu     cpuPerVote
	command string
}

// endToEnd runs intake and the projector (shipped settings) on a fresh
// database and prefix of the shared Redis, and tally loadtest against
// them for d.
func (e *env) endToEnd(ctx context.Context, d time.Duration, concurrency int) (e2eResult, error) {
	keys := e.prefix("e2e")
	defer e.dropPrefix(context.WithoutCancel(ctx), keys.Prefix())
	return e.loadPipeline(ctx, "e2e", "127.0.0.1:18192", []string{"--redis-url", e.redisURL, "--stream-prefix", keys.Prefix()}, d, concurrency)
}

// shape is what a pipeline runs: an intake on each address, and a
// projector with the extra flags projector (S: --workers).
type shape struct {
	addrs     []string
	projector []string
}

// pipeline is intake and a projector (shipped settings) on one database
// and Redis, as E runs them; S runs two intakes.
type pipeline struct {
	intake, projector *proc
	addr              string   // intake's
	intakes           []*proc  // every intake, intake first
	addrs             []string // theirs
}

// startPipeline starts intake on addr (with intakeFlags and extra) and a
// projector, both with the flags common, and waits until intake answers.
func (e *env) startPipeline(ctx context.Context, addr string, common []string, extra ...string) (*pipeline, error) {
	return e.startShape(ctx, shape{addrs: []string{addr}}, common, extra...)
}

// startShape starts sh's intakes (with intakeFlags and extra) and its
// projector, all with the flags common, and waits until every intake
// answers.
func (e *env) startShape(ctx context.Context, sh shape, common []string, extra ...string) (*pipeline, error) {
	p := &pipeline{addrs: sh.addrs}
	for _, addr := range sh.addrs {
		args := slices.Concat([]string{e.tally, "intake", "--allow-superuser", "--listen", addr, "--log-level", "error"},
			common, intakeFlags, e.key.intakeFlags(), extra)
		ip, err := start(ctx, logFile, args...)
		if err != nil {
			p.stop()
			return nil, err
		}
		p.intakes = append(p.intakes, ip)
	}
	p.intake, p.addr = p.intakes[0], p.addrs[0]
	pp, err := start(ctx, logFile, slices.Concat([]string{e.tally, "projector", "--allow-superuser", "--consumer", "bench", "--log-level", "warn"}, common, sh.projector)...)
	if err != nil {
		p.stop()
		return nil, err
	}
	p.projector = pp
	for i, ip := range p.intakes {
		if err := waitHealthy(ctx, ip, p.addrs[i]); err != nil {
			p.stop()
			return nil, err
		}
	}
	return p, nil
}

// stop stops the intakes, then the projector.
func (p *pipeline) stop() {
	for _, ip := range p.intakes {
		ip.stop()
	}
	if p.projector != nil {
		p.projector.stop()
	}
}

// loadPipeline runs intake and the projector on a fresh database and the
// Redis redisFlags name (--redis-url, --stream-prefix, and --redis-mode
// and --shards where not the defaults), intake on addr, and tally
// loadtest against them for d.
func (e *env) loadPipeline(ctx context.Context, what, addr string, redisFlags []string, d time.Duration, concurrency int) (e2eResult, error) {
	return e.loadShape(ctx, what, shape{addrs: []string{addr}}, redisFlags, d, concurrency)
}

// loadShape is loadPipeline with the pipeline sh: tally loadtest sends to
// every intake of sh (one --target each), and the CPU each part uses while
// it sends is followed (cpuWindow).
func (e *env) loadShape(ctx context.Context, what string, sh shape, redisFlags []string, d time.Duration, concurrency int) (e2eResult, error) {
	var res e2eResult
	url, pool, err := e.database(ctx, what)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	common := append([]string{"--database-url", url, "--log-format", "text"}, redisFlags...)
	p, err := e.startShape(ctx, sh, common)
	if err != nil {
		return res, err
	}
	defer p.stop()
	var lt []string
	for _, addr := range sh.addrs {
		lt = append(lt, "--target", "http://"+addr)
	}
	lt = append([]string{"loadtest"}, append(lt, "--duration", d.String(), "--concurrency", itoa(concurrency),
		"--drain-timeout", "60s", "--format", "json")...)
	keyFlags := []string{"--credential-key", e.key.file} // not in the command shown: its file is the run's
	res.command = "tally " + strings.Join(lt, " ") + "  (against tally intake " + strings.Join(intakeFlags, " ") + " and tally projector" +
		strings.TrimSuffix(" "+strings.Join(sh.projector, " "), " ") + ")"
	cctx, cancel := context.WithTimeout(ctx, d+2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, e.tally, slices.Concat(lt, keyFlags, common)...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	progress, err := cmd.StderrPipe()
	if err != nil {
		return res, err
	}
	if err := cmd.Start(); err != nil {
		return res, fmt.Errorf("tally loadtest: %w", err)
	}
	w := e.followCPU(ctx, progress, p, "tally_bench_"+e.run+"_"+what, cmd.Process.Pid)
	if err := cmd.Wait(); err != nil {
		return res, fmt.Errorf("tally loadtest: %w\n%s", err, stdout.String())
	}
	var rep struct {
		Throughput float64 `json:"throughput_per_second"`
		Record     struct {
			P50 float64 `json:"p50_ms"`
			P99 float64 `json:"p99_ms"`
		} `json:"accept_to_recorded_latency"`
		Recorded  int64   `json:"recorded"`
		Attempted int64   `json:"attempted"`
		Drain     float64 `json:"drain_seconds"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		return res, fmt.Errorf("tally loadtest report: %w\n%s", err, stdout.String())
	}
	res.rate, res.p50, res.p99 = rep.Throughput, rep.Record.P50, rep.Record.P99
	res.recorded, res.attempted, res.drain = rep.Recorded, rep.Attempted, rep.Drain
	res.intakeHWM, res.projHWM = p.intake.hwmMB(), p.projector.hwmMB()
	res.cpu = w.perVote()
	return res, nil
}
