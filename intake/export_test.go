package intake

import "github.com/prometheus/client_golang/prometheus"

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

	PostgresReachable prometheus.Gauge
	Degraded          *prometheus.CounterVec // answer
	ResultsQueries    prometheus.Counter
}

// HungRedis is a client of a Redis that never answers (see hungRedis).
var HungRedis = hungRedis

func (s *Server) Metrics() Metrics {
	m := s.metrics
	return Metrics{
		Requests: m.requests, RequestDuration: m.duration, EnqueueDuration: m.enqueue, BatchSize: m.batchSize,
		RateLimited: m.rateLimited, Replays: m.replays, BacklogRefusals: m.backlogRefusals, BreakerState: m.breakerState,
		LedgerChecks:      m.ledgerCheckVec,
		PostgresReachable: m.postgresReachable, Degraded: m.degraded, ResultsQueries: m.resultsReads,
	}
}
