package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sethvargo/go-retry"
)

// Config tunes a Store. The zero value is usable.
type Config struct {
	// MaxBatch bounds the events one Append takes. Default 5000.
	MaxBatch int
	// MaxAttempts bounds how often a batch is tried when PostgreSQL reports
	// a deadlock or serialization failure. Default 5.
	MaxAttempts int
	// Logger receives retries and repairs. Default: discard.
	Logger *slog.Logger
}

// DefaultConfig returns the default of every field.
func DefaultConfig() Config {
	return Config{MaxBatch: 5000, MaxAttempts: 5, Logger: slog.New(slog.DiscardHandler)}
}

// withDefaults fills every zero field with its default.
func (c Config) withDefaults() Config {
	def := DefaultConfig()
	orDefault(&c.MaxBatch, def.MaxBatch)
	orDefault(&c.MaxAttempts, def.MaxAttempts)
	if c.Logger == nil {
		c.Logger = def.Logger
	}
	return c
}

// orDefault sets *v to def when *v is zero.
func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// ConfigError is what is wrong with one setting of a Config: its message
// names the setting in words and says what it takes; Field is the name
// of its Config field, for a caller that spells settings its own way.
type ConfigError struct {
	Field string
	msg   string
}

func (e *ConfigError) Error() string { return e.msg }

// ConfigField is the name of the Config field e is about.
func (e *ConfigError) ConfigField() string { return e.Field }

// Validate reports the first setting of c that is wrong once its zero
// fields took their defaults, as a *ConfigError; nil when there is none.
// New runs it.
func (c Config) Validate() error {
	c = c.withDefaults()
	if c.MaxBatch < 1 || c.MaxBatch > 100_000 {
		return &ConfigError{Field: "MaxBatch", msg: fmt.Sprintf("the most events of one append must be between 1 and 100000, got %d", c.MaxBatch)}
	}
	if c.MaxAttempts < 1 {
		return &ConfigError{Field: "MaxAttempts", msg: fmt.Sprintf("the tries of a transaction must be at least 1, got %d", c.MaxAttempts)}
	}
	return nil
}

// Store is the ledger on one PostgreSQL database.
type Store struct {
	pool *pgxpool.Pool
	cfg  Config
	// fullPathOnly turns off Append's optimistic step, so tests can hold
	// the two steps to the same outcomes.
	fullPathOnly bool
	// leavesAfterRows makes the rebuild read the leaves only once its pass
	// has taken every row, so tests hold the rows that come before their
	// leaves to the same outcomes.
	leavesAfterRows bool
	// latestInSQL makes the rebuild read every poll's last ballots with
	// latestSQL rather than keep them in its pass (log_pass_latest.go).
	latestInSQL bool
	rules       rulesCache // ballots.go
	voters      voterBook  // voters.go
}

// New returns a Store on pool. The schema must be migrated (package
// migrations).
func New(pool *pgxpool.Pool, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	return &Store{pool: pool, cfg: cfg.withDefaults()}, nil
}

// MaxBatch is the most events one Append takes.
func (s *Store) MaxBatch() int { return s.cfg.MaxBatch }

// Ping checks that PostgreSQL answers.
func (s *Store) Ping(ctx context.Context) error {
	return interpretError("ping", s.pool.Ping(ctx))
}

// runTx runs fn in one transaction through pgx.BeginTxFunc, and runs it
// again, up to MaxAttempts times with a jittered backoff, when PostgreSQL
// reports a deadlock or serialization failure. Connection errors are not
// retried here: the caller decides, since a commit may have happened.
func (s *Store) runTx(ctx context.Context, what string, opts pgx.TxOptions, fn func(pgx.Tx) error) error {
	attempt := 0
	var last error // what the last attempt returned
	backoff := retry.WithMaxRetries(uint64(s.cfg.MaxAttempts-1), retry.BackoffFunc(func() (time.Duration, bool) {
		level := slog.LevelWarn
		if errors.Is(last, errRaced) { // expected when entries are redelivered
			level = slog.LevelDebug
		}
		s.cfg.Logger.LogAttrs(ctx, level, "transaction conflict, retrying",
			slog.String("component", "ledger"), slog.String("op", what),
			slog.Int("attempt", attempt), slog.String("error", last.Error()))
		// Quadratic, with up to as much again at random, so that the
		// transactions that collided do not collide again.
		d := time.Duration(attempt*attempt) * 5 * time.Millisecond
		return d + time.Duration(rand.Int64N(int64(d))), false
	}))
	err := retry.Do(ctx, backoff, func(ctx context.Context) error {
		attempt++
		last = interpretError(what, pgx.BeginTxFunc(ctx, s.pool, opts, fn))
		if isConflict(last) {
			return retry.RetryableError(last)
		}
		return last
	})
	if err != nil && err != last { // retry.Do's own: ctx ended before an attempt
		return fmt.Errorf("%s: %w", what, err)
	}
	return err
}
