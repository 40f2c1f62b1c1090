package loadtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sethvargo/go-retry"

	"tally/ledger"
)

// Setup creates the principals and the first poll, and reads the
// dead-letter count the verification compares against.
func (s *Session) Setup(ctx context.Context) error {
	s.phase.Store("setup")
	s.started.Store(time.Now().UnixNano())
	if err := s.addPrincipals(ctx); err != nil {
		return fmt.Errorf("loadtest setup: %w", err)
	}
	if err := s.ensureRound(ctx, 0); err != nil {
		return fmt.Errorf("loadtest setup: %w", err)
	}
	if err := s.readDeadLettersBefore(ctx); err != nil {
		return fmt.Errorf("loadtest setup: %w", err)
	}
	s.log.LogAttrs(ctx, slog.LevelDebug, "loadtest set up", slog.Int("principals", len(s.principals)))
	return nil
}

// waitPollKnown waits until every target's intake holds poll r in its
// catalog (it answers its results: 200): intake knows a poll once it heard
// the NOTIFY of its creation, milliseconds after it. It reads as one of
// the principals (a different one each round, so that no principal's
// reads run out), waits at most 30 seconds, and does not wait for a target
// that does not answer or answers anything but 200, 404 and 429 (it may be
// down on purpose, in a fault test).
func (s *Session) waitPollKnown(ctx context.Context, r int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	id := s.pollID(r)
	token := s.principals[r%len(s.principals)].token
	for _, target := range s.cfg.Targets {
		for {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, target+"/v1/polls/"+id+"/results", nil)
			if err != nil {
				return err
			}
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := s.client.Do(req)
			if err != nil {
				break
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusTooManyRequests {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("intake at %s did not know poll %s within 30s of its creation: is it on the same database?", target, id)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// addPrincipals creates Config.Principals principals, eight at a time.
func (s *Session) addPrincipals(ctx context.Context) error {
	s.principals = make([]principal, s.cfg.Principals)
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		errs = make([]error, 8)
	)
	for w := range min(8, s.cfg.Principals) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(s.principals) || ctx.Err() != nil {
					return
				}
				p, err := retryTransient(ctx, func(ctx context.Context) (principal, error) {
					ps, err := s.store.AddPrincipals(ctx, []string{fmt.Sprintf("loadtest %s #%d", s.prefix, i)}, "")
					if err != nil {
						return principal{}, err
					}
					token, err := s.key.Issue(ps[0].ID, ps[0].CreatedAt, time.Time{})
					return principal{id: ps[0].ID, token: token}, err
				})
				if err != nil {
					errs[w] = fmt.Errorf("create principal %d: %w", i, err)
					return
				}
				s.principals[i] = p
			}
		})
	}
	wg.Wait()
	return errors.Join(append(errs, ctx.Err())...)
}

// readDeadLettersBefore reads the dead-letter count before any vote is
// sent, when there is a queue to read.
func (s *Session) readDeadLettersBefore(ctx context.Context) error {
	if s.queue == nil {
		return nil
	}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	st, err := s.queue.Status(qctx)
	cancel()
	if err != nil {
		return fmt.Errorf("read the queue: %w", err)
	}
	s.deadBefore = st.DeadLetters
	s.queueKnown = true
	return nil
}

// retryTransient runs fn again while it fails with an error
// ledger.IsRetryable calls transient, waiting from 50ms doubling up to 2s,
// for at most 30s in all, so a PostgreSQL restart does not end the
// loadtest. It gives up when ctx ends.
func retryTransient[T any](ctx context.Context, fn func(context.Context) (T, error)) (T, error) {
	b := retry.WithMaxDuration(30*time.Second,
		retry.WithCappedDuration(2*time.Second, retry.NewExponential(50*time.Millisecond)))
	return retry.DoValue(ctx, b, func(ctx context.Context) (T, error) {
		v, err := fn(ctx)
		if ledger.IsRetryable(err) {
			return v, retry.RetryableError(err)
		}
		return v, err
	})
}

// ensureRound makes sure poll r exists, creating it (and only it) when
// it does not yet, and waits for it and for every target to know it.
func (s *Session) ensureRound(ctx context.Context, r int) error {
	s.roundsMu.Lock()
	for len(s.rounds) <= r {
		s.rounds = append(s.rounds, nil)
	}
	rd := s.rounds[r]
	if rd == nil {
		rd = &round{done: make(chan struct{})}
		s.rounds[r] = rd
		go func() {
			cctx := context.WithoutCancel(ctx)
			if rd.err = s.createPoll(cctx, r); rd.err == nil {
				rd.err = s.waitPollKnown(cctx, r)
			}
			close(rd.done)
		}()
	}
	s.roundsMu.Unlock()
	select {
	case <-rd.done:
		return rd.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// prefetchRound starts creating poll r without waiting for it.
func (s *Session) prefetchRound(ctx context.Context, r int) {
	if r >= s.maxRounds() {
		return
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel() // ensureRound starts the creation, then returns at once
	_ = s.ensureRound(cctx, r)
}

// createPoll creates poll r, trying again while PostgreSQL fails
// transiently (retryTransient). A poll found to exist after a failed try
// was created by that try.
func (s *Session) createPoll(ctx context.Context, r int) error {
	p := ledger.Poll{
		Rules: s.ballots.rules,
		ID:    s.pollID(r),
		Title: fmt.Sprintf("loadtest %s round %d", s.prefix, r),
		// Opened a minute ago, so a clock a little behind on intake's host
		// does not find it closed.
		OpensAt: time.Now().Add(-time.Minute),
		Choices: s.ballots.choices,
	}
	tries := 0
	_, err := retryTransient(ctx, func(ctx context.Context) (struct{}, error) {
		tries++
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err := s.store.CreatePoll(ctx, p)
		switch {
		case tries > 1 && errors.Is(err, ledger.ErrExists):
			return struct{}{}, nil
		case ledger.IsRetryable(err):
			s.log.LogAttrs(ctx, slog.LevelWarn, "create poll failed; trying again", slog.String("poll", p.ID), slog.String("error", err.Error()))
		}
		return struct{}{}, err
	})
	if err != nil {
		return fmt.Errorf("create poll %s: %w", p.ID, err)
	}
	return nil
}

// roundsCreated is the number of polls the session created.
func (s *Session) roundsCreated() int {
	s.roundsMu.Lock()
	defer s.roundsMu.Unlock()
	n := 0
	for _, rd := range s.rounds {
		if rd == nil {
			break
		}
		<-rd.done
		if rd.err != nil {
			break
		}
		n++
	}
	return n
}
