package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sethvargo/go-retry"

	"tally/ledger"
)

// This file owns SSE0, SSE, MSSE0 and MSSE: one intake (and a projector)
// under a steady flow of votes on a public poll, in alternating rounds:
// on a poll nobody watches, then on another with sizes.liveViewers
// Server-Sent Events streams of it (GET /v1/polls/{poll_id}/live) open
// from this process. The votes come from this process too, at a fixed
// rate, each the first response of a principal of its own, so that every
// one changes the poll's count. A viewer that misses the final count, or
// gets no update, fails the measurement.

// liveIntakeFlags turn off intake's limit of token lookups per client
// address, as docs/operations.md says to behind a proxy: every vote comes
// from this one address with a token intake has not seen, and at most
// --auth-failure-burst lookups from one address are under way at once (the
// others wait), which would measure that limit instead of the viewers.
var liveIntakeFlags = []string{"--auth-failure-rate", "inf"}

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
	tokens, err := livePolls(ctx, pool, rounds, perWarm+2*rounds*perPhase)
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
// eight at a time, and returns their tokens.
func livePolls(ctx context.Context, pool *pgxpool.Pool, rounds, n int) ([]string, error) {
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
	tokens := make([]string, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for w := range errs {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n && ctx.Err() == nil; i = int(next.Add(1) - 1) {
				_, tok, err := store.AddPrincipal(ctx, "bench live "+itoa(i))
				if err != nil {
					errs[w] = err
					return
				}
				tokens[i] = tok
			}
		})
	}
	wg.Wait()
	return tokens, errors.Join(append(errs, ctx.Err())...)
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

// votePhase sends one vote per token on poll, rate a second for at most
// d (as many as fit), and reads intake's CPU time over it. A vote answered
// other than 202 fails it.
func (p *pipeline) votePhase(ctx context.Context, poll string, tokens []string, rate float64, d time.Duration) (livePhase, error) {
	var ph livePhase
	pid := p.intake.cmd.Process.Pid
	const workers = 32
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		mu       sync.Mutex
		refused  int
		firstErr error
	)
	cpu0 := cpuSeconds(pid)
	ph.start = time.Now()
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				due := ph.start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
				if i >= len(tokens) || due.Sub(ph.start) >= d || !sleepUntil(ctx, due) {
					return
				}
				err := postVote(ctx, client, p.addr, tokens[i], poll, i)
				at := time.Now()
				mu.Lock()
				if err != nil {
					refused++
					if firstErr == nil {
						firstErr = err
					}
				} else {
					ph.accepted = append(ph.accepted, at)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	ph.took = time.Since(ph.start)
	ph.cpu = cpuSeconds(pid) - cpu0
	slices.SortFunc(ph.accepted, time.Time.Compare)
	switch {
	case ctx.Err() != nil:
		return ph, ctx.Err()
	case refused > 0:
		return ph, fmt.Errorf("poll %s: %d of %d votes got no 202, the first: %w", poll, refused, refused+len(ph.accepted), firstErr)
	case len(ph.accepted) == 0:
		return ph, fmt.Errorf("poll %s: no vote was sent", poll)
	}
	return ph, nil
}

// idleCPU is intake's CPU seconds per second over d without requests.
func (p *pipeline) idleCPU(ctx context.Context, d time.Duration) (float64, error) {
	pid := p.intake.cmd.Process.Pid
	cpu0, t0 := cpuSeconds(pid), time.Now()
	if !sleepUntil(ctx, t0.Add(d)) {
		return 0, ctx.Err()
	}
	return (cpuSeconds(pid) - cpu0) / time.Since(t0).Seconds(), nil
}

// sleepUntil sleeps until t, or returns false when ctx ends first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// postVote sends vote i on poll as the principal of token.
func postVote(ctx context.Context, client *http.Client, addr, token, poll string, i int) error {
	body := fmt.Sprintf(`{"event_id":"live-%s-%d","poll_id":%q,"candidate_id":%q}`, poll, i, poll, benchChoices[i%len(benchChoices)])
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/votes", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		b, _ := bufio.NewReader(resp.Body).Peek(300)
		return fmt.Errorf("%s: %s", resp.Status, b)
	}
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return err
}

// waitRecorded waits up to 30s until poll's results count n votes.
func waitRecorded(ctx context.Context, store *ledger.Store, poll string, n int) error {
	var total int64
	err := retry.Do(ctx, retry.WithMaxDuration(30*time.Second, retry.NewConstant(50*time.Millisecond)), func(ctx context.Context) error {
		r, err := store.Results(ctx, poll)
		if err != nil {
			return err
		}
		if total = r.Total; total < int64(n) {
			return retry.RetryableError(errors.New("not yet"))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("poll %s: %d of %d accepted votes recorded within 30s: %w", poll, total, n, err)
	}
	return nil
}

// sseEvent is one results event a viewer read: when, and the total it
// counts.
type sseEvent struct {
	at    time.Time
	total int64
}

// viewer is one open stream.
type viewer struct {
	events []sseEvent // read by its goroutine; by others once done is closed
	err    error
	seen   atomic.Int64 // the total of the latest event; -1 before the first
	done   chan struct{}
}

// viewers are the streams openViewers opened; close ends them.
type viewers struct {
	all    []*viewer
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// openViewers opens n streams of poll, 50 being opened at a time, and
// waits up to 30s until each has read the poll's current state.
func openViewers(ctx context.Context, addr, poll string, n int) (*viewers, error) {
	vctx, cancel := context.WithCancel(ctx)
	vs := &viewers{cancel: cancel}
	client := &http.Client{Transport: &http.Transport{DisableCompression: true, ResponseHeaderTimeout: 10 * time.Second}}
	opening := make(chan struct{}, 50)
	for range n {
		v := &viewer{done: make(chan struct{})}
		v.seen.Store(-1)
		vs.all = append(vs.all, v)
		opening <- struct{}{}
		vs.wg.Go(func() {
			defer close(v.done)
			v.err = v.read(vctx, client, "http://"+addr+"/v1/polls/"+poll+"/live", func() { <-opening })
		})
	}
	if err := vs.waitTotal(ctx, 0, 30*time.Second); err != nil {
		vs.close()
		return nil, err
	}
	return vs, nil
}

// read opens the stream at url, calls opened once it answered (or
// failed), and reads its results events until ctx ends.
func (v *viewer) read(ctx context.Context, client *http.Client, url string, opened func()) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		opened()
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := client.Do(req)
	opened()
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	br := bufio.NewReaderSize(resp.Body, 8<<10)
	var event string
	var data []byte
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("read %s: %w", url, err)
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0:
			if event == "results" {
				var r struct {
					Total int64 `json:"total"`
				}
				if err := json.Unmarshal(data, &r); err != nil {
					return fmt.Errorf("results event of %s: %w", url, err)
				}
				v.events = append(v.events, sseEvent{at: time.Now(), total: r.Total})
				v.seen.Store(r.Total)
			}
			event, data = "", data[:0]
		case bytes.HasPrefix(line, []byte("event: ")):
			event = string(line[len("event: "):])
		case bytes.HasPrefix(line, []byte("data: ")):
			data = append(data, line[len("data: "):]...)
		}
	}
}

// errBehind marks a wait for viewers that have not all caught up.
var errBehind = errors.New("viewers behind")

// waitTotal waits up to limit until every viewer read an event of a total
// of at least n; a viewer that ended fails it.
func (vs *viewers) waitTotal(ctx context.Context, n int64, limit time.Duration) error {
	behind := 0
	err := retry.Do(ctx, retry.WithMaxDuration(limit, retry.NewConstant(20*time.Millisecond)), func(ctx context.Context) error {
		behind = 0
		for _, v := range vs.all {
			select {
			case <-v.done:
				return fmt.Errorf("a live viewer ended: %v", v.err)
			default:
			}
			if v.seen.Load() < n {
				behind++
			}
		}
		if behind > 0 {
			return retry.RetryableError(errBehind)
		}
		return nil
	})
	if errors.Is(err, errBehind) {
		return fmt.Errorf("%d of %d live viewers did not see a total of %d within %s", behind, len(vs.all), n, limit)
	}
	return err
}

// close ends every stream and waits for its reader. Closing twice is safe.
func (vs *viewers) close() {
	vs.cancel()
	vs.wg.Wait()
}

// viewerStats gathers the viewers' latencies, gaps and update counts
// over the watched rounds.
type viewerStats struct {
	lat, gaps []time.Duration
	updates   []int
}

// add adds the figures of the viewers vs of the watched phase ph, from
// their events and its 202s. A viewer that got no update, or missed a
// count, fails it.
func (st *viewerStats) add(vs *viewers, ph livePhase) error {
	acc := ph.accepted
	end := ph.start.Add(ph.took)
	// At most about 100 votes per viewer are followed: enough for the
	// quantiles, and cheap.
	step := max(1, len(acc)/100)
	for _, v := range vs.all {
		if len(v.events) < 2 {
			return errors.New("a live viewer got no update while the votes flowed")
		}
		st.updates = append(st.updates, len(v.events)-1)
		for i := 1; i < len(v.events); i++ {
			if a, b := v.events[i-1].at, v.events[i].at; !a.Before(ph.start) && !b.After(end) {
				st.gaps = append(st.gaps, b.Sub(a))
			}
		}
		j := 0
		for k := step; k <= len(acc); k += step {
			for j < len(v.events) && (v.events[j].total < int64(k) || v.events[j].at.Before(acc[k-1])) {
				j++
			}
			if j == len(v.events) {
				return fmt.Errorf("a live viewer never saw a total of %d", k)
			}
			st.lat = append(st.lat, v.events[j].at.Sub(acc[k-1]))
		}
	}
	return nil
}

// finish sets r's viewer figures.
func (st *viewerStats) finish(r *liveResult) error {
	if len(st.updates) == 0 {
		return errors.New("no live viewer was measured")
	}
	slices.Sort(st.updates)
	r.updatesMin, r.updatesMedian = st.updates[0], st.updates[len(st.updates)/2]
	r.latency50, r.latency99 = quantile(st.lat, 0.5), quantile(st.lat, 0.99)
	r.gap50, r.gap99 = quantile(st.gaps, 0.5), quantile(st.gaps, 0.99)
	return nil
}

// quantile is the q-quantile of ds, which it sorts; 0 for none.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}
