package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sethvargo/go-retry"

	"tally/ledger"
)

// This file owns the live measurement's flow of votes: one vote per
// principal at a fixed rate (votePhase, postVote), intake's CPU time over
// it and at rest (idleCPU), and the wait until the votes are counted
// (waitRecorded).

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
