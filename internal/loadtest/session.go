package loadtest

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"tally/ledger"
)

// principal is one principal of the session; its token lives in memory
// only.
type principal struct {
	id    string
	token string
}

// round is one poll: every principal answers it once.
type round struct {
	done chan struct{} // closed once the poll exists or could not be created
	err  error
}

// Session is one loadtest. Create it with New and call Setup, Send, Drain,
// Verify and Close in that order (Run does); Verify may be called again.
// Progress may be called at any time.
type Session struct {
	cfg    Config
	store  *ledger.Store
	queue  Queue
	client *http.Client
	own    bool // the client is the session's: Close closes its connections
	log    *slog.Logger
	prefix string

	principals []principal
	truth      *truth

	roundsMu sync.Mutex
	rounds   []*round

	tickets   atomic.Int64 // votes handed to workers
	sent      atomic.Int64 // votes with a final answer
	acceptedN atomic.Int64 // of which answered 202
	requests  atomic.Int64 // HTTP requests

	phase      atomic.Value // string
	started    atomic.Int64 // unix nanoseconds of Setup
	sendStart  time.Time
	sendEnd    time.Time
	drainTime  time.Duration
	drained    bool
	drainErr   string
	deadBefore int64
	deadAfter  int64
	queueKnown bool
}

// New checks cfg and returns a session. It does no I/O.
func New(cfg Config, deps Deps) (*Session, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if deps.Store == nil {
		return nil, errors.New("loadtest: a ledger store is required")
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("loadtest: %w", err)
	}
	prefix := cfg.PollPrefix
	if prefix == "" {
		prefix = "lt-" + hex.EncodeToString(b[:4])
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = binary.LittleEndian.Uint64(b[:])
	}
	client, own := deps.Client, false
	if client == nil {
		client, own = newClient(cfg), true
	}
	s := &Session{
		cfg: cfg, store: deps.Store, queue: deps.Queue, client: client, own: own,
		log:    cfg.Logger.With(slog.String("component", "loadtest"), slog.String("polls", prefix)),
		prefix: prefix,
		truth:  newTruth(cfg, seed),
	}
	s.phase.Store("new")
	return s, nil
}

// PollPrefix is the prefix of the ids of the session's polls.
func (s *Session) PollPrefix() string { return s.prefix }

func (s *Session) pollID(r int) string { return s.prefix + "-" + strconv.Itoa(r) }

// maxRounds bounds the polls of a session.
func (s *Session) maxRounds() int { return MaxPolls }

// Setup creates the principals and the first poll, and reads the
// dead-letter count the verification compares against.
func (s *Session) Setup(ctx context.Context) error {
	s.phase.Store("setup")
	s.started.Store(time.Now().UnixNano())
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
				p, token, err := retryLedger(ctx, func() (ledger.Principal, string, error) {
					return s.store.AddPrincipal(ctx, fmt.Sprintf("loadtest %s #%d", s.prefix, i))
				})
				if err != nil {
					errs[w] = fmt.Errorf("create principal %d: %w", i, err)
					return
				}
				s.principals[i] = principal{id: p.ID, token: token}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(append(errs, ctx.Err())...); err != nil {
		return fmt.Errorf("loadtest setup: %w", err)
	}
	if err := s.ensureRound(ctx, 0); err != nil {
		return fmt.Errorf("loadtest setup: %w", err)
	}
	if s.queue != nil {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := s.queue.Status(qctx)
		cancel()
		if err != nil {
			return fmt.Errorf("loadtest setup: read the queue: %w", err)
		}
		s.deadBefore = st.DeadLetters
		s.queueKnown = true
	}
	s.log.LogAttrs(ctx, slog.LevelDebug, "loadtest set up", slog.Int("principals", len(s.principals)))
	return nil
}

// retryLedger runs fn again while it fails with a transient error, for at
// most 30s, so a PostgreSQL restart does not end the loadtest.
func retryLedger(ctx context.Context, fn func() (ledger.Principal, string, error)) (ledger.Principal, string, error) {
	deadline := time.Now().Add(30 * time.Second)
	wait := 50 * time.Millisecond
	for {
		p, tok, err := fn()
		if err == nil || !ledger.IsRetryable(err) || time.Now().After(deadline) {
			return p, tok, err
		}
		if !sleep(ctx, wait) {
			return p, tok, err
		}
		wait = min(wait*2, 2*time.Second)
	}
}

// ensureRound makes sure poll r exists, creating it (and only it) when
// it does not yet, and waits for it.
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
			rd.err = s.createPoll(context.WithoutCancel(ctx), r)
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

// createPoll creates poll r, trying again for up to 30s while PostgreSQL
// fails transiently. A poll found to exist after a failed try was created
// by that try.
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
	deadline := time.Now().Add(30 * time.Second)
	wait := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := s.store.CreatePoll(ctx, p)
		cancel()
		switch {
		case err == nil:
			return nil
		case attempt > 1 && errors.Is(err, ledger.ErrExists):
			return nil
		case !ledger.IsRetryable(err) || time.Now().After(deadline):
			return fmt.Errorf("create poll %s: %w", p.ID, err)
		}
		s.log.LogAttrs(ctx, slog.LevelWarn, "create poll failed; trying again", slog.String("poll", p.ID), slog.String("error", err.Error()))
		time.Sleep(wait)
		wait = min(wait*2, 2*time.Second)
	}
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
	var (
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range s.cfg.Concurrency {
		wg.Go(func() {
			for wctx.Err() == nil {
				i := s.tickets.Add(1) - 1
				if s.cfg.Votes > 0 && i >= int64(s.cfg.Votes) {
					return
				}
				if s.cfg.Rate > 0 {
					at := s.sendStart.Add(time.Duration(float64(i) / s.cfg.Rate * float64(time.Second)))
					if !sleep(wctx, time.Until(at)) {
						return
					}
				}
				if !deadline.IsZero() && !time.Now().Before(deadline) {
					return
				}
				tk, ok := s.truth.next(s.maxRounds())
				if !ok {
					fail(fmt.Errorf("loadtest: the principals answered all %d polls a loadtest may create: raise --principals", s.maxRounds()))
					cancel()
					return
				}
				if tk.kind == kindFirst {
					if err := s.ensureRound(wctx, int(tk.round)); err != nil {
						fail(fmt.Errorf("loadtest: %w", err))
						cancel()
						s.truth.record(tk, answer{err: err}, false, time.Now())
						return
					}
					if int(tk.principal) == 0 {
						s.prefetchRound(wctx, int(tk.round)+1)
					}
				}
				// Each vote goes to the next target; its retries to the ones after.
				s.send(wctx, tk, int(i%int64(len(s.cfg.Targets))))
			}
		})
	}
	wg.Wait()
	s.log.LogAttrs(ctx, slog.LevelDebug, "sending done", slog.Int64("votes", s.sent.Load()),
		slog.Int64("accepted", s.acceptedN.Load()), slog.Duration("took", time.Since(s.sendStart)))
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

// Drain waits until the queue is empty (no entry in the streams, none
// pending) or Config.DrainTimeout has passed. A timeout is not an error:
// Verify reports it. Without a Queue it returns at once.
func (s *Session) Drain(ctx context.Context) error {
	s.phase.Store("draining")
	start := time.Now()
	defer func() { s.drainTime = time.Since(start) }()
	if s.queue == nil {
		s.drained = true
		return nil
	}
	stopProgress := s.startProgress(ctx)
	defer stopProgress()
	deadline := start.Add(s.cfg.DrainTimeout)
	wait := 20 * time.Millisecond
	for {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := s.queue.Status(qctx)
		cancel()
		switch {
		case err == nil && st.Drained():
			s.drained = true
			s.drainErr = ""
			s.deadAfter = st.DeadLetters
			return nil
		case err != nil:
			s.drainErr = "the queue could not be read: " + err.Error()
		default:
			s.drainErr = fmt.Sprintf("%d entries still in the streams, %d pending", st.Backlog, st.Pending)
			s.deadAfter = st.DeadLetters
		}
		if time.Now().After(deadline) {
			s.log.LogAttrs(ctx, slog.LevelWarn, "the queue did not drain in time", slog.String("state", s.drainErr))
			return nil
		}
		if !sleep(ctx, wait) {
			return ctx.Err()
		}
		wait = min(wait*2, 250*time.Millisecond)
	}
}

// Close closes the session's polls and revokes its principals' tokens,
// so nothing is left that takes votes. It tries every one and returns
// what failed.
func (s *Session) Close(ctx context.Context) error {
	s.phase.Store("closing")
	if s.own {
		s.client.CloseIdleConnections()
	}
	var (
		mu   sync.Mutex
		errs []error
		next atomic.Int64
		wg   sync.WaitGroup
	)
	n := s.roundsCreated()
	now := time.Now()
	for range min(8, max(len(s.principals), 1)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				var err error
				switch {
				case i < n:
					err = s.store.ClosePoll(ctx, s.pollID(i), now)
				case i < n+len(s.principals):
					if id := s.principals[i-n].id; id != "" {
						err = s.store.RevokePrincipal(ctx, id)
					}
				default:
					return
				}
				if err != nil {
					mu.Lock()
					if len(errs) < 5 {
						errs = append(errs, err)
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("loadtest close: %w", err)
	}
	return nil
}

// Run runs a whole loadtest: Setup, Send, Drain, Verify and Close. The
// report is returned with an error too when there is one to return (an
// error after sending leaves a partial report). A run that completed with
// failed invariants is not an error: see Report.Failures.
func Run(ctx context.Context, cfg Config, deps Deps) (Report, error) {
	s, err := New(cfg, deps)
	if err != nil {
		return Report{}, err
	}
	if err := s.Setup(ctx); err != nil {
		s.Close(context.WithoutCancel(ctx))
		return Report{}, err
	}
	defer s.Close(context.WithoutCancel(ctx))
	if err := s.Send(ctx); err != nil {
		return s.partialReport(), err
	}
	if err := s.Drain(ctx); err != nil {
		return s.partialReport(), err
	}
	return s.Verify(ctx)
}

// Progress is a snapshot of a session, for a person or a fault test.
type Progress struct {
	Phase    string        `json:"phase"` // setup, sending, draining, verifying, closing
	Elapsed  time.Duration `json:"elapsed"`
	Sent     int64         `json:"sent"`     // votes with a final answer
	Accepted int64         `json:"accepted"` // of which answered 202
	Requests int64         `json:"requests"` // HTTP requests, retries included
	// Rate is the votes answered 202 per second since the previous
	// snapshot the progress loop took (0 from Session.Progress).
	Rate float64 `json:"rate"`
	// Queue is the queue's status, when it could be read.
	Queue *QueueStatus `json:"queue,omitempty"`
}

// Progress returns the session's counters now. It is cheap and safe to
// call from any goroutine.
func (s *Session) Progress() Progress {
	ph, _ := s.phase.Load().(string)
	var el time.Duration
	if st := s.started.Load(); st != 0 {
		el = time.Since(time.Unix(0, st))
	}
	return Progress{Phase: ph, Elapsed: el, Sent: s.sent.Load(), Accepted: s.acceptedN.Load(), Requests: s.requests.Load()}
}

// startProgress calls Config.Progress every ProgressEvery until the
// returned function is called.
func (s *Session) startProgress(ctx context.Context) (stop func()) {
	if s.cfg.Progress == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(s.cfg.ProgressEvery)
		defer t.Stop()
		last, lastAt := s.acceptedN.Load(), time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			p := s.Progress()
			now := time.Now()
			p.Rate = float64(p.Accepted-last) / now.Sub(lastAt).Seconds()
			last, lastAt = p.Accepted, now
			if s.queue != nil {
				qctx, qcancel := context.WithTimeout(ctx, s.cfg.ProgressEvery)
				if st, err := s.queue.Status(qctx); err == nil {
					p.Queue = &st
				}
				qcancel()
			}
			if ctx.Err() == nil {
				s.cfg.Progress(p)
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
