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

	"tally/client"
	"tally/credential"
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
	key    *credential.Key // signs the principals' tokens
	queue  Queue
	client *http.Client
	// intakes send the votes, one client.Client per target, through client.
	intakes []*client.Client
	own     bool // the client is the session's: Close closes its connections
	log     *slog.Logger
	prefix  string

	principals []principal
	truth      *truth
	ballots    *ballotSet

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
	if deps.Key == nil {
		return nil, errors.New("loadtest: a credential key is required to sign the principals' tokens")
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
	ballots, err := newBallotSet(cfg)
	if err != nil {
		return nil, err
	}
	hc, own := deps.Client, false
	if hc == nil {
		hc, own = newClient(cfg), true
	}
	intakes, err := intakes(cfg, hc)
	if err != nil {
		return nil, err
	}
	s := &Session{
		cfg: cfg, store: deps.Store, key: deps.Key, queue: deps.Queue, client: hc, intakes: intakes, own: own,
		log:     cfg.Logger.With(slog.String("component", "loadtest"), slog.String("polls", prefix)),
		prefix:  prefix,
		truth:   newTruth(cfg, seed),
		ballots: ballots,
	}
	s.phase.Store("new")
	return s, nil
}

// PollPrefix is the prefix of the ids of the session's polls.
func (s *Session) PollPrefix() string { return s.prefix }

func (s *Session) pollID(r int) string { return s.prefix + "-" + strconv.Itoa(r) }

// maxRounds bounds the polls of a session.
func (s *Session) maxRounds() int { return MaxPolls }

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
