package loadtest

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"tally/credential"
	"tally/ledger"
	"tally/vote"
)

// Bounds of a Config: a loadtest is a capacity test, not a soak test.
const (
	MaxVotes       = 10_000_000
	MaxDuration    = time.Hour
	MaxRate        = 1_000_000
	MaxConcurrency = 10_000
	MaxPrincipals  = 1_000_000
	MaxPollChoices = 64
	MaxPolls       = 10_000
	MaxDrain       = time.Hour
	MaxAttemptsCap = 1000
)

// Config says what load to send. The zero value of a field means its
// default; Targets and one of Votes and Duration are required.
type Config struct {
	// Targets are the base URLs of intake ("http://127.0.0.1:8080"). Votes
	// go to them in turn, and a vote sent again goes to the next one, as
	// behind a load balancer.
	Targets []string

	// Votes is the number of votes to send, retries and second responses
	// included; at most MaxVotes. Exactly one of Votes and Duration.
	Votes int
	// Duration is how long to send; at most MaxDuration.
	Duration time.Duration
	// Rate is the votes per second to send; 0 sends as fast as Concurrency
	// workers go. At most MaxRate. Each vote has its time on the schedule;
	// a vote late on it (every worker was busy, intake was down) goes at
	// once, so the rate catches up after a stall.
	Rate float64
	// Concurrency is the number of votes under way at once (and of HTTP
	// connections kept alive per target). Default 32.
	Concurrency int

	// Principals is the number of principals created. Default 1000. Each
	// answers each poll once, so the polls needed are about the first
	// responses divided by Principals; at most MaxPolls.
	Principals int
	// PollChoices is the number of choices of each poll, 2 to
	// MaxPollChoices. Default 4.
	PollChoices int
	// Kind is the ballot kind of the polls (vote.Kinds); default single.
	// Every kind but single is sent as a "ballot" body, drawn from a fixed
	// set of valid ballots (ballots.go). Answers is their answers mode:
	// with latest, a second response replaces the principal's ballot, and
	// the one counted is its last in the poll's log. Default final.
	Kind    vote.Kind
	Answers vote.Answers

	// RetryShare, KeyReuseShare and SecondResponseShare are the fractions
	// of the votes that are exact retries, key reuse and second responses
	// (see the package documentation). Each in [0, 1], their sum at most 1.
	// The rest are first responses. Defaults 0 (none).
	RetryShare          float64
	KeyReuseShare       float64
	SecondResponseShare float64

	// AllowReorder accepts that the ledger counted a principal's second
	// response instead of the first (several projectors, or one killed
	// while it held entries). Default false: that is a failure.
	AllowReorder bool

	// DrainTimeout bounds the wait for the queue to empty after sending.
	// Default 2m; at most MaxDrain.
	DrainTimeout time.Duration
	// RequestTimeout bounds one HTTP request. Default 10s.
	RequestTimeout time.Duration
	// MaxAttempts bounds the requests one vote costs: a request without an
	// answer, a 429, or a 503 or 5xx, is sent again up to this many
	// requests in all. Default 20.
	MaxAttempts int
	// BackoffMin and BackoffMax bound the wait before a request that got
	// no answer is sent again: it doubles from BackoffMin, with full
	// jitter. Defaults 50ms and 2s.
	BackoffMin, BackoffMax time.Duration
	// MaxRetryAfter caps the Retry-After honoured. Default 10s.
	MaxRetryAfter time.Duration

	// Progress, when set, is called about every ProgressEvery while
	// sending and draining, from a goroutine of its own.
	Progress      func(Progress)
	ProgressEvery time.Duration // default 1s

	// PollPrefix prefixes the ids of the polls created. Default
	// "lt-" and 8 random hex digits; at most 40 characters of
	// [A-Za-z0-9_-].
	PollPrefix string
	// Seed seeds the choice of votes; 0 picks a random seed.
	Seed uint64

	// Logger receives what goes wrong on the way. Default: discard.
	Logger *slog.Logger
}

// Deps are the connections a Session works with.
type Deps struct {
	// Store is the ledger: the polls and principals are created there, and
	// the verification reads it. Required.
	Store *ledger.Store
	// Queue reads the backlog, to wait for it to drain and to show it.
	// Nil: Drain does not wait, and progress shows no backlog.
	Queue Queue
	// Client sends the votes. Default: a client whose transport keeps
	// Concurrency connections alive per target.
	Client *http.Client
	// Key signs the principals' tokens; every target must take it (tally
	// intake --credential-key). Required.
	Key *credential.Key
}

func (c Config) withDefaults() Config {
	if c.Concurrency == 0 {
		c.Concurrency = 32
	}
	if c.Principals == 0 {
		c.Principals = 1000
	}
	if c.PollChoices == 0 {
		c.PollChoices = 4
	}
	if c.Kind == "" {
		c.Kind = vote.KindSingle
	}
	if c.Answers == "" {
		c.Answers = vote.AnswersFinal
	}
	setDur := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	setDur(&c.DrainTimeout, 2*time.Minute)
	setDur(&c.RequestTimeout, 10*time.Second)
	setDur(&c.BackoffMin, 50*time.Millisecond)
	setDur(&c.BackoffMax, 2*time.Second)
	setDur(&c.MaxRetryAfter, 10*time.Second)
	setDur(&c.ProgressEvery, time.Second)
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 20
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Targets = append([]string(nil), c.Targets...)
	for i, t := range c.Targets {
		c.Targets[i] = strings.TrimRight(t, "/")
	}
	return c
}

// Validate reports what is wrong with c once its defaults are applied;
// New calls it.
func (c Config) Validate() error { return c.withDefaults().validate() }

func (c Config) validate() error {
	var p problems
	c.validateLoad(&p)
	c.validateVotes(&p)
	c.validateTiming(&p)
	if c.PollPrefix != "" && (len(c.PollPrefix) > 40 || !vote.ValidID(c.PollPrefix)) {
		p.add("poll prefix %q must be 1-40 characters of [A-Za-z0-9_-]", c.PollPrefix)
	}
	if err := errors.Join(p...); err != nil {
		return fmt.Errorf("loadtest config: %w", err)
	}
	return nil
}

// problems collects what is wrong with a Config, so validate reports it all
// at once.
type problems []error

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Errorf(format, args...)) }

// validateLoad checks where the votes go, how many and how fast.
func (c Config) validateLoad(p *problems) {
	if len(c.Targets) == 0 {
		p.add("give the intake URL to send to (--target http://HOST:PORT)")
	}
	for _, t := range c.Targets {
		u, err := url.Parse(t)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.add("target %q is not an http:// or https:// URL with a host", t)
		}
	}
	switch {
	case c.Votes == 0 && c.Duration == 0:
		p.add("give the number of votes to send or how long to send (--votes N or --duration D)")
	case c.Votes != 0 && c.Duration != 0:
		p.add("give either the number of votes (%d) or a duration (%s), not both", c.Votes, c.Duration)
	case c.Votes < 0 || c.Votes > MaxVotes:
		p.add("votes must be between 1 and %d, got %d", MaxVotes, c.Votes)
	case c.Duration < 0 || c.Duration > MaxDuration:
		p.add("duration must be above 0 and at most %s, got %s", MaxDuration, c.Duration)
	}
	if c.Rate < 0 || math.IsNaN(c.Rate) || c.Rate > MaxRate {
		p.add("rate must be 0 (as fast as possible) or a positive number of votes per second up to %d, got %v", MaxRate, c.Rate)
	}
	if c.Concurrency < 1 || c.Concurrency > MaxConcurrency {
		p.add("concurrency must be between 1 and %d, got %d", MaxConcurrency, c.Concurrency)
	}
}

// validateVotes checks who votes, in which polls, and the shares of each
// kind of vote.
func (c Config) validateVotes(p *problems) {
	if c.Principals < 1 || c.Principals > MaxPrincipals {
		p.add("principals must be between 1 and %d, got %d", MaxPrincipals, c.Principals)
	}
	if _, err := pollRules(c); err != nil {
		p.add("%v", err)
	}
	if c.PollChoices < 2 || c.PollChoices > MaxPollChoices {
		p.add("poll choices must be between 2 and %d, got %d", MaxPollChoices, c.PollChoices)
	}
	shares := []struct {
		name string
		v    float64
	}{{"retry share", c.RetryShare}, {"key reuse share", c.KeyReuseShare}, {"second response share", c.SecondResponseShare}}
	sum := 0.0
	for _, s := range shares {
		if !(s.v >= 0 && s.v <= 1) {
			p.add("%s must be a fraction between 0 and 1, got %v", s.name, s.v)
		}
		sum += s.v
	}
	if sum > 1+1e-9 {
		p.add("the retry, key reuse and second response shares add up to %v; they must leave room for first responses (at most 1)", sum)
	}
	if c.Votes > 0 && c.Principals > 0 {
		if polls := (c.Votes + c.Principals - 1) / c.Principals; polls > MaxPolls {
			p.add("%d votes over %d principals may need up to %d polls, more than %d: raise the principals", c.Votes, c.Principals, polls, MaxPolls)
		}
	}
}

// validateTiming checks the timeouts, the retries and the progress
// interval.
func (c Config) validateTiming(p *problems) {
	if c.DrainTimeout < 0 || c.DrainTimeout > MaxDrain {
		p.add("drain timeout must be between 0 and %s, got %s", MaxDrain, c.DrainTimeout)
	}
	if c.RequestTimeout <= 0 || c.RequestTimeout > 5*time.Minute {
		p.add("request timeout must be above 0 and at most 5m, got %s", c.RequestTimeout)
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > MaxAttemptsCap {
		p.add("max attempts must be between 1 and %d, got %d", MaxAttemptsCap, c.MaxAttempts)
	}
	if c.BackoffMin <= 0 || c.BackoffMax < c.BackoffMin || c.BackoffMax > time.Minute {
		p.add("backoff bounds must satisfy 0 < min <= max <= 1m, got min %s max %s", c.BackoffMin, c.BackoffMax)
	}
	if c.MaxRetryAfter <= 0 || c.MaxRetryAfter > 5*time.Minute {
		p.add("max Retry-After must be above 0 and at most 5m, got %s", c.MaxRetryAfter)
	}
	if c.ProgressEvery <= 0 {
		p.add("progress interval must be positive, got %s", c.ProgressEvery)
	}
}
