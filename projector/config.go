package projector

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/mod/sumdb/note"
)

// MaxWorkers bounds Config.Workers.
const MaxWorkers = 16

// Config tunes a Projector. The zero value is usable: every zero field
// takes the default its comment names.
type Config struct {
	// Consumer is this projector's name in the consumer group. Two live
	// projectors must not share it. Default: host name and process id,
	// "host-1234".
	Consumer string

	// BatchSize is the most entries applied in one transaction, and the
	// COUNT of each stream read. Default 1000; at most the ledger's
	// MaxBatch.
	BatchSize int
	// BatchWait is how long a batch waits for more entries after its first
	// one arrived before it is applied anyway. Default 50ms.
	BatchWait time.Duration
	// Workers is how many batches may be applied at once, each in a
	// transaction of its own on a connection of its own. Entries are
	// split among the workers by principal, so each principal's entries
	// reach the ledger in stream order. Default 2, at most MaxWorkers.
	Workers int

	// MinIdle is how long an entry must have been pending, unacknowledged,
	// before another consumer claims it. It must be well above the time a
	// batch takes to apply, or live consumers steal each other's work.
	// Default 30s.
	MinIdle time.Duration
	// ClaimInterval is how often pending entries are looked for. Default
	// MinIdle/4, at least 10ms.
	ClaimInterval time.Duration
	// MaxDeliveries is how often an entry may be delivered before it is
	// dead-lettered instead of applied, unless this projector saw it fail
	// only for transient reasons (PostgreSQL down). Default 10.
	MaxDeliveries int

	// MaxAttempts bounds the tries of one batch on transient errors;
	// after the last one the batch is left pending for a later claim.
	// Default 8.
	MaxAttempts int
	// BackoffMin and BackoffMax bound the wait between tries, which doubles
	// from BackoffMin, with jitter. Defaults 100ms and 5s.
	BackoffMin, BackoffMax time.Duration
	// ApplyTimeout bounds one Append call; past it the outcome is uncertain
	// and treated as a transient error. Default 30s.
	ApplyTimeout time.Duration

	// BreakerFailures is how many consecutive transient failures open the
	// circuit breaker. Default 5.
	BreakerFailures int
	// BreakerOpenFor is how long the breaker stays open before it lets one
	// probe batch through. Default 5s.
	BreakerOpenFor time.Duration

	// ShutdownGrace is how long the batches in flight, and the one being
	// filled, may still take to commit once Run's context is cancelled.
	// Default 5s.
	ShutdownGrace time.Duration
	// StatsInterval is how often the backlog, pending and dead-letter
	// gauges are refreshed from Redis. Default 5s.
	StatsInterval time.Duration

	// LogSigner, when set, signs a checkpoint of every poll's log whose
	// head changed, and the projector stores it (see checkpoints.go); the
	// applier must then also be a Checkpointer, as *ledger.Store is. nil:
	// no checkpoints are signed (another projector, given the key, signs
	// them).
	LogSigner note.Signer
	// CheckpointInterval is how often the changed heads are signed, so a
	// busy poll gets at most one checkpoint an interval. Default 1s.
	CheckpointInterval time.Duration
}

// DefaultConfig returns the default of every field that has a fixed one:
// the one place the defaults are written. Consumer and ClaimInterval stay
// zero, since their defaults follow from the host and from MinIdle; New
// fills them in.
func DefaultConfig() Config {
	return Config{
		BatchSize:       1000,
		BatchWait:       50 * time.Millisecond,
		Workers:         2,
		MinIdle:         30 * time.Second,
		MaxDeliveries:   10,
		MaxAttempts:     8,
		BackoffMin:      100 * time.Millisecond,
		BackoffMax:      5 * time.Second,
		ApplyTimeout:    30 * time.Second,
		BreakerFailures: 5,
		BreakerOpenFor:  5 * time.Second,
		ShutdownGrace:   5 * time.Second,
		StatsInterval:   5 * time.Second,

		CheckpointInterval: time.Second,
	}
}

// withDefaults fills every zero field with its default.
func (c Config) withDefaults() Config {
	def := DefaultConfig()
	orDefault(&c.BatchSize, def.BatchSize)
	orDefault(&c.BatchWait, def.BatchWait)
	orDefault(&c.Workers, def.Workers)
	orDefault(&c.MinIdle, def.MinIdle)
	orDefault(&c.MaxDeliveries, def.MaxDeliveries)
	orDefault(&c.MaxAttempts, def.MaxAttempts)
	orDefault(&c.BackoffMin, def.BackoffMin)
	orDefault(&c.BackoffMax, def.BackoffMax)
	orDefault(&c.ApplyTimeout, def.ApplyTimeout)
	orDefault(&c.BreakerFailures, def.BreakerFailures)
	orDefault(&c.BreakerOpenFor, def.BreakerOpenFor)
	orDefault(&c.ShutdownGrace, def.ShutdownGrace)
	orDefault(&c.StatsInterval, def.StatsInterval)
	orDefault(&c.CheckpointInterval, def.CheckpointInterval)
	orDefault(&c.ClaimInterval, max(c.MinIdle/4, 10*time.Millisecond))
	if c.Consumer == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "projector"
		}
		c.Consumer = host + "-" + strconv.Itoa(os.Getpid())
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
// of its Config field, for a caller that spells settings its own way
// (tally projector names the flag).
type ConfigError struct {
	Field string
	msg   string
}

func (e *ConfigError) Error() string { return e.msg }

// ConfigField is the name of the Config field e is about.
func (e *ConfigError) ConfigField() string { return e.Field }

// Validate reports the first setting of c that is wrong once its zero
// fields took their defaults, as a *ConfigError; nil when there is none.
// New runs it, and checks the batch size against the ledger's too; a
// caller may run it first, before it opens any connection.
func (c Config) Validate() error { return c.withDefaults().validate(0) }

// validate checks a Config after withDefaults. maxBatch is the most events
// the applier takes in one call (0: unknown).
func (c Config) validate(maxBatch int) error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.BatchSize < 1:
		return bad("BatchSize", "the batch size must be at least 1, got %d", c.BatchSize)
	case maxBatch > 0 && c.BatchSize > maxBatch:
		return bad("BatchSize", "the batch size %d is more than the ledger takes in one transaction (%d): lower the batch size or raise the ledger's batch bound", c.BatchSize, maxBatch)
	case c.BatchWait < 0:
		return bad("BatchWait", "the batch wait must not be negative, got %s", c.BatchWait)
	case c.Workers < 1 || c.Workers > MaxWorkers:
		return bad("Workers", "the workers must be between 1 and %d, got %d: each one holds a batch and a PostgreSQL connection, and past the database's cores more only wait on each other's locks", MaxWorkers, c.Workers)
	case c.MinIdle < time.Millisecond:
		return bad("MinIdle", "the min idle time must be at least 1ms, got %s", c.MinIdle)
	case c.ClaimInterval <= 0:
		return bad("ClaimInterval", "the claim interval must be positive, got %s", c.ClaimInterval)
	case c.MaxDeliveries < 1:
		return bad("MaxDeliveries", "the max deliveries must be at least 1, got %d", c.MaxDeliveries)
	case c.MaxAttempts < 1:
		return bad("MaxAttempts", "the max attempts must be at least 1, got %d", c.MaxAttempts)
	case c.BackoffMin <= 0:
		return bad("BackoffMin", "the least backoff must be positive, got %s", c.BackoffMin)
	case c.BackoffMax < c.BackoffMin:
		return bad("BackoffMax", "the longest backoff must be at least the least backoff (%s), got %s", c.BackoffMin, c.BackoffMax)
	case c.ApplyTimeout <= 0:
		return bad("ApplyTimeout", "the apply timeout must be positive, got %s", c.ApplyTimeout)
	case c.BreakerFailures < 1:
		return bad("BreakerFailures", "the breaker failures must be at least 1, got %d", c.BreakerFailures)
	case c.BreakerOpenFor <= 0:
		return bad("BreakerOpenFor", "the breaker open time must be positive, got %s", c.BreakerOpenFor)
	case c.ShutdownGrace < 0:
		return bad("ShutdownGrace", "the shutdown grace must not be negative, got %s", c.ShutdownGrace)
	case c.StatsInterval <= 0:
		return bad("StatsInterval", "the stats interval must be positive, got %s", c.StatsInterval)
	case c.CheckpointInterval <= 0:
		return bad("CheckpointInterval", "the checkpoint interval must be positive, got %s", c.CheckpointInterval)
	}
	return nil
}
