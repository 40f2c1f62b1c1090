package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
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
					p, token, err := s.store.AddPrincipal(ctx, fmt.Sprintf("loadtest %s #%d", s.prefix, i))
					return principal{id: p.ID, token: token}, err
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
				rd.err = s.waitKnown(cctx, s.pollID(r))
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
	choices := make([]string, s.cfg.PollChoices)
	for i := range choices {
		choices[i] = candidateID(i)
	}
	p := ledger.Poll{
		ID:    s.pollID(r),
		Title: fmt.Sprintf("loadtest %s round %d", s.prefix, r),
		// Opened a minute ago, so a clock a little behind on intake's host
		// does not find it closed.
		OpensAt: time.Now().Add(-time.Minute),
		Choices: choices,
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

// knownWithin bounds the wait for every target to know a new poll.
const knownWithin = 15 * time.Second

// waitKnown waits until every target answers GET
// /v1/polls/{poll_id}/results for poll: intake holds the catalog in
// memory and learns of a new poll by its NOTIFY, so a vote sent at once
// could be answered 404 unknown-poll. It asks every 25ms, for at most
// knownWithin, as the first principal.
func (s *Session) waitKnown(ctx context.Context, poll string) error {
	if len(s.principals) == 0 {
		return nil
	}
	token := s.principals[0].token
	for _, target := range s.cfg.Targets {
		status := 0
		err := retry.Do(ctx, retry.WithMaxDuration(knownWithin, retry.NewConstant(25*time.Millisecond)), func(ctx context.Context) error {
			status = s.resultsStatus(ctx, target, poll, token)
			if status != http.StatusOK {
				return retry.RetryableError(errNotKnown)
			}
			return nil
		})
		if errors.Is(err, errNotKnown) {
			return fmt.Errorf("intake at %s did not know poll %s %s after its creation (its results answered %d): "+
				"is it connected to the database the loadtest writes to?", target, poll, knownWithin, status)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// errNotKnown marks a poll a target does not know yet.
var errNotKnown = errors.New("poll not known yet")

// resultsStatus is the status of GET /v1/polls/{poll}/results at target,
// 0 when it got no answer.
func (s *Session) resultsStatus(ctx context.Context, target, poll, token string) int {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target+"/v1/polls/"+poll+"/results", nil)
	if err != nil {
		return 0
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := s.client.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer))
	return resp.StatusCode
}
