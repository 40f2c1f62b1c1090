package projector

import (
	"context"
	"errors"
	"log/slog"

	"github.com/sony/gobreaker/v2"

	"tally/ledger"
)

// newBreaker returns the PostgreSQL circuit breaker every Append goes
// through: Config.BreakerFailures transient failures in a row open it,
// and after Config.BreakerOpenFor it lets one probe batch through. Its
// state is the breaker gauge, and each change is logged.
func (p *Projector) newBreaker() *gobreaker.CircuitBreaker[[]ledger.Outcome] {
	return gobreaker.NewCircuitBreaker[[]ledger.Outcome](gobreaker.Settings{
		Name:        "postgresql",
		MaxRequests: 1,
		Timeout:     p.cfg.BreakerOpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.ConsecutiveFailures >= uint32(p.cfg.BreakerFailures)
		},
		// A permanent error means PostgreSQL answered: the data was bad.
		IsSuccessful: func(err error) bool { return err == nil || !isTransient(err) },
		// A stop is no verdict on PostgreSQL.
		IsExcluded:    func(err error) bool { return errors.Is(err, context.Canceled) },
		OnStateChange: p.breakerChanged,
	})
}

func (p *Projector) breakerChanged(_ string, from, to gobreaker.State) {
	p.m.breaker.Set(breakerValue(to))
	attrs := []any{slog.String("from", from.String()), slog.String("to", to.String())}
	switch to {
	case gobreaker.StateOpen:
		p.log.Warn("circuit breaker open: PostgreSQL is failing, reading paused", attrs...)
	case gobreaker.StateHalfOpen:
		p.log.Info("circuit breaker half-open: probing PostgreSQL with one batch", attrs...)
	case gobreaker.StateClosed:
		p.log.Info("circuit breaker closed: PostgreSQL answers, reading resumed", attrs...)
	}
}

// breakerValue is the breaker gauge's value for s.
func breakerValue(s gobreaker.State) float64 {
	switch s {
	case gobreaker.StateHalfOpen:
		return 1
	case gobreaker.StateOpen:
		return 2
	}
	return 0
}

// isTransient reports an error after which the same batch may succeed: a
// retryable ledger error, an uncertain outcome (timeout, stop), or the
// breaker refusing the call.
func isTransient(err error) bool {
	return ledger.IsRetryable(err) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		breakerRefused(err)
}

// breakerRefused reports the breaker refusing a call: open, or half-open
// with its probe already out.
func breakerRefused(err error) bool {
	return errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests)
}
