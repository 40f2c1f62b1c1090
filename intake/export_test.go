package intake

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tally/ledger"
)

// Metrics are a Server's metrics, for the tests of package intake_test to
// read with prometheus/testutil.
type Metrics struct {
	Requests        *prometheus.CounterVec   // route, code
	RequestDuration *prometheus.HistogramVec // route
	EnqueueDuration *prometheus.HistogramVec // outcome
	BatchSize       prometheus.Histogram
	RateLimited     prometheus.Counter
	Replays         prometheus.Counter
	BacklogRefusals prometheus.Counter
	BreakerState    prometheus.Gauge
	LedgerChecks    *prometheus.CounterVec // outcome
	Credentials     *prometheus.CounterVec // result

	PostgresReachable prometheus.Gauge
	Degraded          *prometheus.CounterVec // answer
	ResultsQueries    prometheus.Counter

	BoundRefusals    *prometheus.CounterVec // bound
	ConnectionErrors *prometheus.CounterVec // kind

	CatalogLoads   prometheus.Counter
	CatalogChanges prometheus.Counter
}

// SetResultsClock has s's results cache tell the figures' age by now, so
// a test moves them past Config.ReadCacheTTL without waiting. Set it
// before s serves.
func SetResultsClock(s *Server, now func() time.Time) { s.results.now = now }

// HungRedis is a client of a Redis that never answers (see hungRedis).
var HungRedis = hungRedis

func (s *Server) Metrics() Metrics {
	m := s.metrics
	return Metrics{
		Requests: m.requests, RequestDuration: m.duration, EnqueueDuration: m.enqueue, BatchSize: m.batchSize,
		RateLimited: m.rateLimited, Replays: m.replays, BacklogRefusals: m.backlogRefusals, BreakerState: m.breakerState,
		LedgerChecks: m.ledgerCheckVec, Credentials: m.credentialVec,
		PostgresReachable: m.postgresReachable, Degraded: m.degraded, ResultsQueries: m.resultsReads,
		BoundRefusals: m.bounds, ConnectionErrors: m.connErrors,
		CatalogLoads: m.catalogLoads, CatalogChanges: m.catalogChanges,
	}
}

// CatalogHolds reports whether the catalog in memory holds poll id.
func (s *Server) CatalogHolds(id string) bool {
	_, err := s.catalog.lookup([]byte(id))
	return err == nil
}

// CatalogPoll is poll id as the catalog in memory holds it (its
// eligibility list left out), if it does.
func (s *Server) CatalogPoll(id string) (ledger.Poll, bool) {
	pi, err := s.catalog.lookup([]byte(id))
	if err != nil {
		return ledger.Poll{}, false
	}
	return pi.poll, true
}

// Revoked reports whether the revocations in memory refuse principal id.
func (s *Server) Revoked(id string) bool {
	// Issued in a day: a reissue's valid-after time does not refuse it.
	refused, _ := s.revoked.refuses(id, "", time.Now().Add(24*time.Hour))
	return refused
}

// Reload brings the catalog and the revocations up to date as Serve
// does, for a handler that is not served.
func (s *Server) Reload(ctx context.Context) error { return s.follow.catchUp(ctx) }
