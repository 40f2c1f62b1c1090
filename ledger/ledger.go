package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

func (c Config) withDefaults() Config {
	if c.MaxBatch == 0 {
		c.MaxBatch = 5000
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 5
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	if c.MaxBatch < 1 || c.MaxBatch > 100_000 {
		return fmt.Errorf("ledger: MaxBatch must be between 1 and 100000, got %d", c.MaxBatch)
	}
	if c.MaxAttempts < 1 {
		return fmt.Errorf("ledger: MaxAttempts must be at least 1, got %d", c.MaxAttempts)
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
	rules        rulesCache // ballots.go
}

// New returns a Store on pool. The schema must be migrated (package
// migrations).
func New(pool *pgxpool.Pool, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Store{pool: pool, cfg: cfg}, nil
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

// isConflict reports a deadlock or serialization failure: the transaction
// certainly rolled back, and running it again is safe.
func isConflict(err error) bool {
	if errors.Is(err, errRaced) || errors.Is(err, errRedefined) {
		return true
	}
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) &&
		(pgErr.Code == codeDeadlockDetected || pgErr.Code == codeSerializationFailure)
}
