package intake

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
)

// metrics are intake's Prometheus metrics. Labels are bounded: route
// templates, status codes, enqueue outcomes.
type metrics struct {
	requests        *prometheus.CounterVec   // route, code
	duration        *prometheus.HistogramVec // route
	enqueue         *prometheus.HistogramVec // outcome
	batchSize       prometheus.Histogram
	rateLimited     prometheus.Counter
	replays         prometheus.Counter
	backlogRefusals prometheus.Counter
	breakerState    prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tally", Subsystem: "intake", Name: "requests_total",
			Help: "HTTP requests answered, by route template and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "tally", Subsystem: "intake", Name: "request_duration_seconds",
			Help:    "Time to answer an HTTP request, by route template.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"route"}),
		enqueue: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "tally", Subsystem: "intake", Name: "enqueue_duration_seconds",
			Help:    "Time of the enqueue round trip to Redis, by outcome.",
			Buckets: []float64{.00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"outcome"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "tally", Subsystem: "intake", Name: "enqueue_batch_size",
			Help:    "Votes per Redis pipeline: votes that arrive while a pipeline is under way share the next one.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
		}),
		rateLimited: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "tally", Subsystem: "intake", Name: "rate_limited_total",
			Help: "Votes refused with 429 by the per-principal rate limit.",
		}),
		replays: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "tally", Subsystem: "intake", Name: "idempotent_replays_total",
			Help: "Votes answered 202 again because the same event id with the same payload was already enqueued.",
		}),
		backlogRefusals: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "tally", Subsystem: "intake", Name: "backlog_refusals_total",
			Help: "Votes refused with 503 because the stream backlog was at its bound.",
		}),
		breakerState: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "tally", Subsystem: "intake", Name: "redis_breaker_state",
			Help: "State of the Redis circuit breaker: 0 closed, 1 half-open, 2 open.",
		}),
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.enqueue, m.batchSize, m.rateLimited, m.replays, m.backlogRefusals, m.breakerState} {
		if err := reg.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("register intake metrics: %w", err)
	}
	return m, nil
}

// breakerValue maps a breaker state to the gauge's value.
func breakerValue(s gobreaker.State) float64 {
	switch s {
	case gobreaker.StateHalfOpen:
		return 1
	case gobreaker.StateOpen:
		return 2
	}
	return 0
}
