package intake

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// This file owns the checks of a Config: Validate, and the ConfigError
// that names the field and says in words what is wrong.

// ConfigError is what is wrong with one setting of a Config: its message
// names the setting in words and says what it takes; Field is the name
// of its Config field, for a caller that spells settings its own way
// (tally intake names the flag).
type ConfigError struct {
	Field string
	msg   string
}

func (e *ConfigError) Error() string { return e.msg }

// ConfigField is the name of the Config field e is about.
func (e *ConfigError) ConfigField() string { return e.Field }

// Validate reports every setting of c that is wrong once its zero fields
// took their defaults, each a *ConfigError, joined; nil when there is
// none. New runs it; a caller may run it first, before it opens any
// connection.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &ConfigError{Field: field, msg: fmt.Sprintf(format, args...)})
	}
	c.checkVotePath(bad)
	c.checkLimits(bad)
	c.checkDurations(bad)
	c.checkConnections(bad)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("intake config: %w", err)
	}
	return nil
}

// checkVotePath checks the settings of the vote path: its rate, its
// backlog, idempotency and the Redis pipelines.
func (c Config) checkVotePath(bad func(field, format string, args ...any)) {
	if c.Rate <= 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) || c.Rate > 1e6 {
		bad("Rate", "the votes per second of one principal must be above 0 and at most 1000000, got %v", c.Rate)
	}
	if c.Burst < 1 || c.Burst > 1_000_000 {
		bad("Burst", "the burst of votes of one principal must be between 1 and 1000000, got %d", c.Burst)
	}
	if c.MaxBacklog < 1 {
		bad("MaxBacklog", "the backlog bound must be at least 1 entry, got %d", c.MaxBacklog)
	}
	if c.IdempotencyWindow < time.Second {
		bad("IdempotencyWindow", "the idempotency window must be at least 1s, got %s", c.IdempotencyWindow)
	}
	if c.WaitReplicas < 0 {
		bad("WaitReplicas", "the replicas a vote waits for must be 0 (off) or more, got %d", c.WaitReplicas)
	}
	if c.EnqueuePipelines < 1 || c.EnqueuePipelines > 1024 {
		bad("EnqueuePipelines", "the enqueue pipelines under way must be between 1 and 1024, got %d", c.EnqueuePipelines)
	}
	if c.EnqueueBatch < 1 || c.EnqueueBatch > 10_000 {
		bad("EnqueueBatch", "the votes of one enqueue pipeline must be between 1 and 10000, got %d", c.EnqueueBatch)
	}
	if c.BreakerFailures < 1 {
		bad("BreakerFailures", "the Redis failures that open the breaker must be at least 1, got %d", c.BreakerFailures)
	}
}

// checkLimits checks the limits kept in memory.
func (c Config) checkLimits(bad func(field, format string, args ...any)) {
	for _, l := range []struct {
		rate, burst, what string
		r                 float64
		b                 int
	}{
		{"AuthFailureRate", "AuthFailureBurst", "failed authentications of one client address", c.AuthFailureRate, c.AuthFailureBurst},
		{"ReadRate", "ReadBurst", "reads of one principal", c.ReadRate, c.ReadBurst},
	} {
		if math.IsNaN(l.r) || l.r < 0.001 || (l.r > 1e6 && !math.IsInf(l.r, 1)) {
			bad(l.rate, "the %s per second must be between 0.001 and 1000000, or +Inf to turn the limit off, got %v", l.what, l.r)
		}
		if l.b < 1 || l.b > 1_000_000 {
			bad(l.burst, "the burst of %s must be between 1 and 1000000, got %d", l.what, l.b)
		}
	}
	if c.LimitEntries < 1 {
		bad("LimitEntries", "the entries of each table of limits must be at least 1, got %d", c.LimitEntries)
	}
}

// checkDurations checks the durations.
func (c Config) checkDurations(bad func(field, format string, args ...any)) {
	for _, d := range []struct {
		field, what string
		v           time.Duration
	}{
		{"BacklogRetryAfter", "the Retry-After of a full backlog", c.BacklogRetryAfter},
		{"WaitTimeout", "the bound on waiting for replicas", c.WaitTimeout},
		{"RequestTimeout", "the request timeout", c.RequestTimeout},
		{"RedisTimeout", "the Redis timeout", c.RedisTimeout},
		{"PostgresTimeout", "the PostgreSQL timeout", c.PostgresTimeout},
		{"ReadCacheTTL", "the read cache TTL", c.ReadCacheTTL},
		{"CatalogRefresh", "the catalog refresh period", c.CatalogRefresh},
		{"CatalogLoadTimeout", "the catalog load timeout", c.CatalogLoadTimeout},
		{"BreakerOpenFor", "the breaker's open time", c.BreakerOpenFor},
		{"ReadHeaderTimeout", "the read header timeout", c.ReadHeaderTimeout},
		{"ReadTimeout", "the read timeout", c.ReadTimeout},
		{"WriteTimeout", "the write timeout", c.WriteTimeout},
		{"IdleTimeout", "the idle timeout", c.IdleTimeout},
		{"ShutdownTimeout", "the shutdown timeout", c.ShutdownTimeout},
		{"LiveIdle", "the live listener's idle time", c.LiveIdle},
	} {
		if d.v < 0 {
			bad(d.field, "%s must not be negative, got %s", d.what, d.v)
		}
	}
	if c.WriteTimeout > 0 && c.RequestTimeout > c.WriteTimeout {
		bad("RequestTimeout", "the request timeout (%s) must not exceed the write timeout (%s), or answers would be cut off", c.RequestTimeout, c.WriteTimeout)
	}
	if c.LiveHeartbeat < 100*time.Millisecond {
		bad("LiveHeartbeat", "the live heartbeat must be at least 100ms, got %s", c.LiveHeartbeat)
	}
	if c.LiveInterval < time.Millisecond || c.LiveInterval > time.Minute {
		bad("LiveInterval", "the live interval must be between 1ms and 1m, got %s", c.LiveInterval)
	}
}

// checkConnections checks the bounds on connections and live streams and
// the TLS files.
func (c Config) checkConnections(bad func(field, format string, args ...any)) {
	if c.MaxConns < 1 {
		bad("MaxConns", "the connection bound must be at least 1, got %d", c.MaxConns)
	}
	for _, b := range []struct {
		field, what string
		v           int
	}{
		{"MaxConnsPerAddr", "the connections of one client address", c.MaxConnsPerAddr},
		{"MaxLivePerAddr", "the live streams of one client address", c.MaxLivePerAddr},
		{"MaxLivePerPrincipal", "the live streams of one principal", c.MaxLivePerPrincipal},
	} {
		if b.v < NoBound {
			bad(b.field, "the bound on %s must be at least 1, or %d for no bound, got %d", b.what, NoBound, b.v)
		}
	}
	if c.MaxLiveViewers < 1 || c.MaxLiveViewers >= c.MaxConns && c.MaxConns > 1 {
		bad("MaxLiveViewers", "the live streams bound must be at least 1 and below the connection bound (%d), so that votes keep connections, got %d",
			c.MaxConns, c.MaxLiveViewers)
	}
	if c.MaxHeaderBytes < 1<<10 {
		bad("MaxHeaderBytes", "the request headers bound must be at least 1024 bytes, got %d", c.MaxHeaderBytes)
	}
	if c.Pprof && c.AdminListen == "" {
		bad("Pprof", "the profiles are served on the admin listener only: give it an address too (on the loopback interface)")
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		bad("TLSCertFile", "the TLS certificate and key files go together (got certificate %q, key %q): give both to serve TLS, or neither for plain HTTP",
			c.TLSCertFile, c.TLSKeyFile)
	}
}
