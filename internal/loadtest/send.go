package loadtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"tally/internal/pause"

	"github.com/sethvargo/go-retry"
	"golang.org/x/sync/errgroup"
)

// Send sends the votes: Config.Votes of them, or for Config.Duration, at
// Config.Rate, with Config.Concurrency under way at once. It returns once
// every vote has its final answer; an error only when the load could not
// be sent (a poll could not be created, ctx ended).
func (s *Session) Send(ctx context.Context) error {
	if len(s.principals) == 0 {
		return errors.New("loadtest: call Setup before Send")
	}
	s.phase.Store("sending")
	s.sendStart = time.Now()
	defer func() { s.sendEnd = time.Now() }()
	stopProgress := s.startProgress(ctx)
	defer stopProgress()

	var deadline time.Time
	if s.cfg.Duration > 0 {
		deadline = s.sendStart.Add(s.cfg.Duration)
	}
	// The first worker that cannot go on stops the others.
	g, wctx := errgroup.WithContext(ctx)
	for range s.cfg.Concurrency {
		g.Go(func() error { return s.work(wctx, deadline) })
	}
	err := g.Wait()
	s.log.LogAttrs(ctx, slog.LevelDebug, "sending done", slog.Int64("votes", s.sent.Load()),
		slog.Int64("accepted", s.acceptedN.Load()), slog.Duration("took", time.Since(s.sendStart)))
	if err != nil {
		return err
	}
	return ctx.Err()
}

// work is one worker: it takes the next ticket, waits for its time on the
// schedule, plans the vote and sends it, until the votes are sent, the
// deadline has passed or ctx ends. An error means the load cannot go on.
func (s *Session) work(ctx context.Context, deadline time.Time) error {
	for ctx.Err() == nil {
		i := s.tickets.Add(1) - 1
		if s.cfg.Votes > 0 && i >= int64(s.cfg.Votes) {
			return nil
		}
		if !s.waitTurn(ctx, i, deadline) {
			return nil
		}
		tk, ok := s.truth.next(s.maxRounds())
		if !ok {
			return fmt.Errorf("loadtest: the principals answered all %d polls a loadtest may create: raise --principals", s.maxRounds())
		}
		if err := s.openRound(ctx, tk); err != nil {
			return err
		}
		// Each vote goes to the next target; its retries to the ones after.
		s.send(ctx, tk, int(i%int64(len(s.cfg.Targets))))
	}
	return nil
}

// waitTurn waits until ticket i's time on the Config.Rate schedule, and
// reports whether it may still be sent (ctx alive, deadline not passed).
func (s *Session) waitTurn(ctx context.Context, i int64, deadline time.Time) bool {
	if s.cfg.Rate > 0 {
		at := s.sendStart.Add(time.Duration(float64(i) / s.cfg.Rate * float64(time.Second)))
		if !pause.For(ctx, time.Until(at)) {
			return false
		}
	}
	return deadline.IsZero() || time.Now().Before(deadline)
}

// openRound makes sure the poll of a first response exists before it is
// sent, and starts creating the next poll as the round's first principal
// votes. A poll that cannot be created ends the load: the vote is
// recorded as unanswered.
func (s *Session) openRound(ctx context.Context, tk task) error {
	if tk.kind != kindFirst {
		return nil
	}
	if err := s.ensureRound(ctx, int(tk.round)); err != nil {
		s.truth.record(tk, answer{err: err}, false, time.Now())
		return fmt.Errorf("loadtest: %w", err)
	}
	if int(tk.principal) == 0 {
		s.prefetchRound(ctx, int(tk.round)+1)
	}
	return nil
}

// errNoFinalAnswer marks a request whose answer (none, 429, 5xx) sends
// the vote again.
var errNoFinalAnswer = errors.New("no final answer")

// send sends one vote until it gets a final answer or MaxAttempts requests
// were made. A request without an answer is sent again with the same key
// after voteBackoff; each request goes to the next target.
func (s *Session) send(ctx context.Context, tk task, turn int) {
	p := s.principals[tk.principal]
	v := s.ballots.vote(keyID(tk.key), s.pollID(int(tk.round)), int(tk.candidate))
	var (
		a         answer
		ambiguous bool
		attempt   int
	)
	// The error is ctx's or errNoFinalAnswer: either way a is the last answer.
	_ = retry.Do(ctx, s.voteBackoff(&a), func(ctx context.Context) error {
		attempt++
		s.requests.Add(1)
		a = s.post(ctx, (turn+attempt-1)%len(s.cfg.Targets), p.token, v)
		if !retryable(a) || attempt >= s.cfg.MaxAttempts || ctx.Err() != nil {
			return nil
		}
		if !a.definite() {
			ambiguous = true
		}
		s.truth.noteRetry(a)
		if a.status == 0 && !errors.Is(a.err, context.Canceled) {
			s.cfg.Logger.DebugContext(ctx, "vote got no answer; sending it again", "key", keyID(tk.key), "attempt", attempt, "error", a.err.Error())
		}
		return retry.RetryableError(errNoFinalAnswer)
	})
	s.truth.record(tk, a, ambiguous, time.Now())
	s.sent.Add(1)
	if a.status == http.StatusAccepted {
		s.acceptedN.Add(1)
	}
}

// voteBackoff is the wait before a vote is sent again after the answer
// *last: its Retry-After, at most MaxRetryAfter, when it has one;
// otherwise doubling from BackoffMin up to BackoffMax, with full jitter.
func (s *Session) voteBackoff(last *answer) retry.Backoff {
	jittered := retry.WithFullJitter(retry.WithCappedDuration(s.cfg.BackoffMax, retry.NewExponential(s.cfg.BackoffMin)))
	return retry.BackoffFunc(func() (time.Duration, bool) {
		d, _ := jittered.Next() // every request counts towards the doubling
		if last.retryAfter > 0 {
			return min(last.retryAfter, s.cfg.MaxRetryAfter), false
		}
		return d, false
	})
}
