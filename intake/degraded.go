package intake

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tally/ledger"
)

// This file owns what intake knows of PostgreSQL from its own lookups, and
// so when it falls back on what it read before. While PostgreSQL does not
// answer, intake stays useful where that is safe for the business
// (signed credentials and the catalog need no query at all):
//
//   - results answer the last figures intake read, marked stale (reads.go);
//   - a vote's status answers pending when its record in Redis shows it
//     was accepted after PostgreSQL stopped answering, so it cannot have
//     been applied (reads.go);
//   - /readyz reads 200 degraded (reads.go).

// pgRetryEvery and pgRetryMax bound how long after a failed lookup, while
// PostgreSQL does not answer, one lookup tries it again: as long as it has
// not answered so far, from pgRetryEvery to pgRetryMax, so that the trials
// of a long outage space out (1, 2, 4, 8, then every 10 seconds) and
// those of a short one do not. The others fall back at once (or answer
// 503 when they have nothing to fall back on) instead of each waiting for
// a query that would most likely fail: with PostgreSQL unreachable rather
// than refusing, each would wait Config.PostgresTimeout. The catalog's
// follower and /readyz's ping try on their own schedules, and an answer
// to any of them ends the outage at once.
const (
	pgRetryEvery = time.Second
	pgRetryMax   = 10 * time.Second
)

// errPostgresDown is the error of a lookup not sent because PostgreSQL did
// not answer the last one, tried less than its wait ago.
var errPostgresDown = errors.New("PostgreSQL did not answer intake's last lookup; it is tried again within 10 seconds")

// retryWait is how long after a failed trial the next one is sent, when
// PostgreSQL has not answered for down.
func retryWait(down time.Duration) time.Duration { return min(max(down, pgRetryEvery), pgRetryMax) }

// pgState is whether PostgreSQL answers intake's lookups. It is fed by
// every lookup (observe) and by /readyz's ping.
type pgState struct {
	log       *slog.Logger
	reachable prometheus.Gauge
	downSince atomic.Int64 // unix ns of the first failure in a row; 0 while it answers
	nextTry   atomic.Int64 // unix ns; before it, lookups that may skip it do
}

func newPGState(log *slog.Logger, reachable prometheus.Gauge) *pgState {
	reachable.Set(1)
	return &pgState{log: log, reachable: reachable}
}

// skip reports whether a lookup should not be sent now: PostgreSQL did not
// answer the last one, and its wait (retryWait) has not passed. Once it
// has, one caller gets false and tries.
func (p *pgState) skip(now time.Time) bool {
	since := p.downSince.Load()
	if since == 0 {
		return false
	}
	next := p.nextTry.Load()
	if now.UnixNano() < next {
		return true
	}
	return !p.nextTry.CompareAndSwap(next, now.Add(retryWait(now.Sub(time.Unix(0, since)))).UnixNano())
}

// observe records what a lookup made for a request with context ctx got:
// an answer (rows, or ledger.ErrNotFound), or a failure. A lookup cut
// short because the client went away says nothing of PostgreSQL.
func (p *pgState) observe(ctx context.Context, err error) {
	if err == nil || errors.Is(err, ledger.ErrNotFound) {
		if p.downSince.Swap(0) != 0 {
			p.reachable.Set(1)
			p.log.Info("PostgreSQL answers again")
		}
		return
	}
	if errors.Is(err, errPostgresDown) || ctx.Err() == context.Canceled {
		return
	}
	p.failedAt(err, time.Now())
}

// failedAt records a lookup that failed with err at now.
func (p *pgState) failedAt(err error, now time.Time) {
	if p.downSince.CompareAndSwap(0, now.UnixNano()) {
		p.reachable.Set(0)
		p.log.Warn("PostgreSQL does not answer; serving the polls held in memory and stale results",
			slog.String("error", err.Error()))
	}
	down := now.Sub(time.Unix(0, p.downSince.Load())) // 0 for the first failure; < 0 if it answered meanwhile
	p.nextTry.Store(now.Add(retryWait(down)).UnixNano())
}

// acceptedSinceDown reports whether an event accepted age ago was accepted
// after PostgreSQL stopped answering intake, and PostgreSQL still does not:
// then no projector can have applied it yet (unless intake alone is cut off
// from PostgreSQL), so it is still in its stream.
func (p *pgState) acceptedSinceDown(age time.Duration, now time.Time) bool {
	since := p.downSince.Load()
	return since != 0 && age < now.Sub(time.Unix(0, since))
}
