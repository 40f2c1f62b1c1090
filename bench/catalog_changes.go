package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// This file owns what the catalog measurement (catalog.go) times once the
// catalog is loaded: a change made at intake A until intake B enforces it,
// the admin's POST latency, a burst of changes for B's memory, and B's
// vote latency while polls are created at A.

// enforceLimit bounds the wait for one change to be enforced at B.
const enforceLimit = 30 * time.Second

// changeTimes are the latencies of the changes made at A.
type changeTimes struct {
	enforced []time.Duration // A's answer to B's first vote answered as the change says
	create   []time.Duration // POST /v1/polls of one poll at A
	close    []time.Duration // POST /v1/polls/{id}/close at A
}

// changesEnforced makes n changes at A, one at a time: a new poll, then
// its closing, and so on. After each it votes at B, one vote after the
// other, until B answers as the change says (202 for the new poll, which
// B answered 404 before; 422 for the closed one), and times that from A's
// answer.
func (c *catalogRun) changesEnforced(ctx context.Context, n int) (changeTimes, error) {
	var t changeTimes
	for i := range n {
		id := fmt.Sprintf("x%d", i/2)
		t0 := time.Now()
		want := http.StatusAccepted
		if i%2 == 0 {
			if err := c.client.createPoll(ctx, c.addrA, id); err != nil {
				return t, err
			}
			t.create = append(t.create, time.Since(t0))
		} else {
			if err := c.client.closePoll(ctx, c.addrA, id); err != nil {
				return t, err
			}
			t.close = append(t.close, time.Since(t0))
			want = http.StatusUnprocessableEntity
		}
		d, err := c.enforcedAtB(ctx, id, want)
		if err != nil {
			return t, err
		}
		t.enforced = append(t.enforced, d)
	}
	return t, nil
}

// enforcedAtB votes on poll at B until the answer is want, for at most
// enforceLimit, and returns how long that took.
func (c *catalogRun) enforcedAtB(ctx context.Context, poll string, want int) (time.Duration, error) {
	start := time.Now()
	for {
		code, err := c.client.vote(ctx, c.addrB, poll)
		if err != nil {
			return 0, fmt.Errorf("vote at B: %w", err)
		}
		if code == want {
			return time.Since(start), nil
		}
		if time.Since(start) > enforceLimit {
			return 0, fmt.Errorf("intake B still answered %d for poll %s %s after the change at A (want %d)", code, poll, enforceLimit, want)
		}
	}
}

// steadyChanges makes n changes at A: n/2 new polls in bulk requests of
// 50, then their closings one by one; it returns once B enforces the last
// closing. half runs when half the changes are made and enforced.
func (c *catalogRun) steadyChanges(ctx context.Context, n int, half func()) error {
	var ids []string
	for i := range n / 2 {
		ids = append(ids, fmt.Sprintf("s%d", i))
	}
	for i := 0; i < len(ids); i += 50 {
		if err := c.client.createPolls(ctx, c.addrA, ids[i:min(len(ids), i+50)]); err != nil {
			return err
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := c.enforcedAtB(ctx, ids[len(ids)-1], http.StatusAccepted); err != nil {
		return err
	}
	half()
	for _, id := range ids {
		if err := c.client.closePoll(ctx, c.addrA, id); err != nil {
			return err
		}
	}
	_, err := c.enforcedAtB(ctx, ids[len(ids)-1], http.StatusUnprocessableEntity)
	return err
}

// voteRate and voteSenders shape the votes whose latency is measured: a
// steady flow, well under what intake takes, so that the latency is a
// vote's and not a queue's.
const (
	voteRate    = 400 // votes a second
	voteSenders = 4
)

// voteRounds are B's vote latencies in rounds that alternate between
// votes alone and votes while polls are created at A, in the order none,
// creating, then creating, none, and so on, so that a drift of the
// machine's load weighs on both ways alike.
type voteRounds struct {
	none, creating [][]time.Duration // each round's latencies
	// cpuNone and cpuCreating are B's CPU seconds in each round of each
	// way, and created the polls created in each creating round.
	cpuNone, cpuCreating []float64
	created              []int
}

// cpuPerPoll is B's CPU per poll created, in seconds: in each pair of
// rounds, the CPU of the round with creations less that of the one
// without, over the polls created; the median of the pairs (a round that
// other work on the machine slowed weighs as one), and every pair's.
func (v voteRounds) cpuPerPoll() (float64, []float64) {
	pairs := make([]float64, len(v.created))
	for i, n := range v.created {
		pairs[i] = (v.cpuCreating[i] - v.cpuNone[i]) / float64(max(1, n))
	}
	sorted := slices.Clone(pairs)
	slices.Sort(sorted)
	return sorted[len(sorted)/2], pairs
}

// voteRounds runs sz.catalogRounds rounds of each way, each of
// sz.catalogVoteFor, and starts no pair of rounds once
// sz.catalogVoteBudget has passed since the first (which always runs).
func (c *catalogRun) voteRounds(ctx context.Context, sz sizes) (voteRounds, error) {
	var v voteRounds
	pid := c.b.cmd.Process.Pid
	start := time.Now()
	for round := 0; round < sz.catalogRounds && (round == 0 || time.Since(start) < sz.catalogVoteBudget); round++ {
		for k := range 2 {
			creating := (round+k)%2 == 1
			cpu0 := threadsCPU(pid)
			lats, n, err := c.voteLatencies(ctx, sz.catalogVoteFor, creating, round)
			if err != nil {
				return v, err
			}
			cpu := threadsCPU(pid) - cpu0
			if creating {
				v.creating, v.cpuCreating, v.created = append(v.creating, lats), append(v.cpuCreating, cpu), append(v.created, n)
			} else {
				v.none, v.cpuNone = append(v.none, lats), append(v.cpuNone, cpu)
			}
		}
	}
	return v, nil
}

// roundP99s is the p99 of each round, in the order they ran.
func roundP99s(rounds [][]time.Duration) []time.Duration {
	out := make([]time.Duration, len(rounds))
	for i, r := range rounds {
		out[i] = quantile(slices.Clone(r), 0.99)
	}
	return out
}

// msList is ds in milliseconds, "1.80, 2.10 ms".
func msList(ds []time.Duration) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = fmt.Sprintf("%.2f", msOf(d))
	}
	return strings.Join(s, ", ") + " ms"
}

// threadsCPU is the CPU time pid's threads have run, in seconds, to the
// nanosecond (the sum of each thread's /proc/PID/task/TID/schedstat), where
// /proc/PID/stat counts in ticks of 10 ms: a round of a few seconds of B
// takes a few of them. A thread that ended meanwhile drops out (Go's
// threads seldom end); 0 when nothing can be read.
func threadsCPU(pid int) float64 {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0
	}
	var ns int64
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			ns += n
		}
	}
	return float64(ns) / 1e9
}

// voteLatencies sends votes on poll c0 at B at voteRate for d (at most
// voteRate × d votes), and, with creating, creates polls at A at 10 a
// second meanwhile. Each vote must be answered 202. It returns every
// vote's latency and the polls created.
func (c *catalogRun) voteLatencies(ctx context.Context, d time.Duration, creating bool, round int) ([]time.Duration, int, error) {
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	total := int(voteRate * d.Seconds())
	var mu sync.Mutex
	var lats []time.Duration
	var firstErr error
	stop := make(chan struct{})
	created := 0
	var cw sync.WaitGroup
	if creating {
		cw.Go(func() {
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				if err := c.client.createPoll(ctx, c.addrA, fmt.Sprintf("v%d-%d", round, i)); err != nil {
					mu.Lock()
					firstErr = cmpErr(firstErr, err)
					mu.Unlock()
					return
				}
				created++
			}
		})
	}
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) * voteSenders / voteRate)
	start := time.Now()
	for s := range voteSenders {
		wg.Go(func() {
			for i := s; i < total; i += voteSenders {
				due := start.Add(time.Duration(i/voteSenders) * interval)
				if w := time.Until(due); w > 0 {
					time.Sleep(w)
				}
				if ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				code, err := c.client.vote(ctx, c.addrB, catalogPollID(0))
				lat := time.Since(t0)
				mu.Lock()
				if err == nil && code != http.StatusAccepted {
					err = fmt.Errorf("a vote at B answered %d, want 202", code)
				}
				firstErr = cmpErr(firstErr, err)
				lats = append(lats, lat)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(stop)
	cw.Wait()
	if firstErr != nil {
		return nil, created, firstErr
	}
	if len(lats) < total {
		return nil, created, fmt.Errorf("%d of %d votes sent within %s", len(lats), total, d+30*time.Second)
	}
	return lats, created, nil
}

// cmpErr is first, or err when first is nil.
func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}
