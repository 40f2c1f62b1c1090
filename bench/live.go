package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"tally/ledger"
)

// This file owns SSE0, SSE, MSSE0 and MSSE: one intake (and a projector)
// under a steady flow of votes on a public poll, in alternating rounds:
// on a poll nobody watches, then on another with sizes.liveViewers
// Server-Sent Events streams of it (GET /v1/polls/{poll_id}/live) open
// from this process. The votes come from this process too, at a fixed
// rate, each the first response of a principal of its own, so that every
// one changes the poll's count. A viewer that misses the final count, or
// gets no update, fails the measurement. Here are the rounds, their polls
// and principals, and the result; the votes are in live_load.go, the
// viewers in live_viewers.go, and their figures in live_stats.go.

// liveIntakeFlags turn off intake's limits per client address (and the
// live streams' per principal), as docs/operations.md says to behind a
// proxy: every vote and every viewer comes from this one address. With
// them, at most --auth-failure-burst token lookups would be under way at
// once (the others wait), and at most --max-live-per-addr viewers would
// get a stream, which would measure those limits instead of the viewers.
var liveIntakeFlags = []string{"--auth-failure-rate", "inf",
	"--max-conns-per-addr", "-1", "--max-live-per-addr", "-1", "--max-live-per-principal", "-1"}

// measureLive: SSE0 and MSSE0 without viewers, SSE and MSSE with them.
func measureLive(ctx context.Context, e *env, sz sizes, t *table) error {
	load := loadAvg()
	r, err := e.live(ctx, sz.liveViewers, sz.liveRate, sz.liveFor, sz.liveRounds)
	if err != nil {
		return err
	}
	votes := fmt.Sprintf("%s votes/s on a public poll, %d round(s) of %s alternating with SSE's", thousands(sz.liveRate), sz.liveRounds, sz.liveFor)
	t.add(fig{id: "SSE0", what: "live: intake's CPU under " + votes + ", no live viewer (the baseline of SSE)",
		value: 1000 * r.base.cpuRate(), unit: "ms CPU/s", extra: fmt.Sprintf("%.0f µs per vote; %d votes; idle before them %.0f ms CPU/s", r.base.cpuPerVote(), r.base.votes, 1000*r.idle),
		load: load, command: r.command})
	t.add(fig{id: "MSSE0", what: "memory: intake peak RSS in SSE0", value: r.base.hwm, unit: "MB", load: load, command: "VmHWM of intake after the first round of SSE0, before any viewer"})
	t.add(fig{id: "SSE", what: fmt.Sprintf("live: intake's CPU under the same votes on another poll with %s Server-Sent Events viewers of it", thousands(float64(r.viewers))),
		value: 1000 * r.watched.cpuRate(), unit: "ms CPU/s",
		extra: fmt.Sprintf("the k-th 202 to a viewer's first event with a total of k or more p50 %s, p99 %s; between a viewer's events p50 %s, p99 %s; updates per viewer min %d, median %d; all %d saw the final count",
			ms(r.latency50), ms(r.latency99), ms(r.gap50), ms(r.gap99), r.updatesMin, r.updatesMedian, r.viewers),
		load: load, command: r.command})
	t.add(fig{id: "MSSE", what: fmt.Sprintf("memory: intake peak RSS with %s live viewers (SSE)", thousands(float64(r.viewers))),
		value: r.watched.hwm, unit: "MB", load: load, command: "VmHWM of intake after SSE"})
	return nil
}

// liveResult is what measureLive reports.
type liveResult struct {
	base, watched liveSide
	idle          float64 // intake's CPU seconds per second with no request
	viewers       int
	// latency: from a vote's 202 to the first event of a viewer whose
	// total counts as many votes as had been accepted by then; gap:
	// between two events of a viewer while the votes flowed.
	latency50, latency99 time.Duration
	gap50, gap99         time.Duration
	// updatesMin and updatesMedian: events per viewer past the first.
	updatesMin, updatesMedian int
	command                   string
}

// livePhase is one flow of votes.
type livePhase struct {
	accepted []time.Time // each vote's 202, in time order
	start    time.Time
	took     time.Duration
	cpu      float64 // intake's CPU seconds while the votes flowed
}

// liveSide is the rounds of one side, without viewers or with them.
type liveSide struct {
	votes int
	took  time.Duration
	cpu   float64 // intake's CPU seconds
	hwm   float64 // intake's peak RSS, MB
}

func (s *liveSide) add(p livePhase) {
	s.votes += len(p.accepted)
	s.took += p.took
	s.cpu += p.cpu
}

// cpuRate is intake's CPU seconds per second while the votes flowed.
func (s liveSide) cpuRate() float64 { return s.cpu / s.took.Seconds() }

func (s liveSide) cpuPerVote() float64 { return 1e6 * s.cpu / float64(s.votes) }

// live runs intake and a projector, and rounds times rate votes per
// second for d on a poll nobody watches, then viewers streams of another
// poll and the same votes on it.
func (e *env) live(ctx context.Context, viewers int, rate float64, d time.Duration, rounds int) (liveResult, error) {
	res := liveResult{viewers: viewers}
	// Each stream is a socket here and in intake, which inherits the limit.
	if err := raiseOpenFiles(uint64(viewers) + 1024); err != nil {
		return res, err
	}
	url, pool, err := e.database(ctx, "live")
	if err != nil {
		return res, err
	}
	defer pool.Close()
	// A short flow first, on a poll of its own, warms intake up (its
	// connections, caches and heap) before the baseline is measured.
	warm := min(time.Second, d/4)
	perPhase, perWarm := int(rate*d.Seconds()), int(rate*warm.Seconds())
	began := time.Now()
	tokens, err := e.livePolls(ctx, pool, rounds, perWarm+2*rounds*perPhase)
	if err != nil {
		return res, err
	}
	fmt.Fprintf(os.Stderr, "bench: live: %d principals created in %s\n", len(tokens), time.Since(began).Round(100*time.Millisecond))
	take := func(n int) []string {
		t := tokens[:n]
		tokens = tokens[n:]
		return t
	}
	keys := e.prefix("live")
	defer e.dropPrefix(context.WithoutCancel(ctx), keys.Prefix())
	const addr = "127.0.0.1:18194"
	p, err := e.startPipeline(ctx, addr, []string{"--database-url", url, "--log-format", "text",
		"--redis-url", e.redisURL, "--stream-prefix", keys.Prefix()}, liveIntakeFlags...)
	if err != nil {
		return res, err
	}
	defer p.stop()
	res.command = fmt.Sprintf("bench -only live  (%d SSE streams and votes at %s/s, %d round(s) of %s on each side, each vote from its own principal, from the bench; "+
		"tally intake %s and tally projector)", viewers, thousands(rate), rounds, d, strings.Join(slices.Concat(intakeFlags, liveIntakeFlags), " "))
	store, err := ledger.New(pool, ledger.Config{})
	if err != nil {
		return res, err
	}

	if _, err := p.votePhase(ctx, livePollID("warm", 0), take(perWarm), rate, warm); err != nil {
		return res, err
	}
	if res.idle, err = p.idleCPU(ctx, min(2*time.Second, d/5)); err != nil {
		return res, err
	}
	var st viewerStats
	for r := range rounds {
		base, err := p.votePhase(ctx, livePollID("base", r), take(perPhase), rate, d)
		if err != nil {
			return res, err
		}
		if err := waitRecorded(ctx, store, livePollID("base", r), len(base.accepted)); err != nil {
			return res, err
		}
		res.base.add(base)
		if r == 0 {
			res.base.hwm = p.intake.hwmMB()
		}
		watched, err := p.watchedPhase(ctx, livePollID("watched", r), take(perPhase), viewers, rate, d, &st)
		if err != nil {
			return res, err
		}
		res.watched.add(watched)
	}
	res.watched.hwm = p.intake.hwmMB()
	return res, st.finish(&res)
}

// watchedPhase opens viewers streams of poll, sends the votes of tokens
// on it, waits until every viewer saw them all counted, and adds the
// viewers' figures to st.
func (p *pipeline) watchedPhase(ctx context.Context, poll string, tokens []string, viewers int, rate float64, d time.Duration, st *viewerStats) (livePhase, error) {
	vs, err := openViewers(ctx, p.addr, poll, viewers)
	if err != nil {
		return livePhase{}, err
	}
	defer vs.close()
	ph, err := p.votePhase(ctx, poll, tokens, rate, d)
	if err != nil {
		return ph, err
	}
	if err := vs.waitTotal(ctx, int64(len(ph.accepted)), 30*time.Second); err != nil {
		return ph, err
	}
	vs.close()
	return ph, st.add(vs, ph)
}

// livePollID is the poll of one phase: the warm-up, or round's baseline
// or watched one.
func livePollID(phase string, round int) string { return "live-" + phase + "-" + itoa(round) }

// livePolls creates the public polls of rounds rounds and n principals,
// and returns their tokens, signed with the run's key.
func (e *env) livePolls(ctx context.Context, pool *pgxpool.Pool, rounds, n int) ([]string, error) {
	store, err := ledger.New(pool, ledger.Config{})
	if err != nil {
		return nil, err
	}
	ids := []string{livePollID("warm", 0)}
	for r := range rounds {
		ids = append(ids, livePollID("base", r), livePollID("watched", r))
	}
	for _, id := range ids {
		p := ledger.Poll{ID: id, Title: "bench live", OpensAt: time.Unix(0, 0), Choices: benchChoices, PublicResults: true}
		if err := store.CreatePoll(ctx, p); err != nil {
			return nil, err
		}
	}
	tokens := make([]string, 0, n)
	for len(tokens) < n {
		names := make([]string, min(n-len(tokens), ledger.MaxPrincipalsPerAdd))
		for i := range names {
			names[i] = "bench live " + itoa(len(tokens)+i)
		}
		ps, err := store.AddPrincipals(ctx, names, "")
		if err != nil {
			return nil, err
		}
		more, err := e.key.issue(ps, ps[0].CreatedAt)
		if err != nil {
			return nil, err
		}
		tokens = append(tokens, more...)
	}
	return tokens, nil
}

// raiseOpenFiles raises the soft limit of open files to need, at most the
// hard limit; children started after it inherit it.
func raiseOpenFiles(need uint64) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("read the open-files limit: %w", err)
	}
	if lim.Cur >= need {
		return nil
	}
	lim.Cur = min(need, lim.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("raise the open-files limit to %d: %w", lim.Cur, err)
	}
	if lim.Cur < need {
		return fmt.Errorf("the open-files limit is %d, and the live viewers need %d: raise it (ulimit -Hn)", lim.Max, need)
	}
	return nil
}
