package projector

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the projector's Prometheus series. Every label has a small,
// fixed set of values.
type metrics struct {
	events    *prometheus.CounterVec // outcome, reason
	batchSize prometheus.Histogram
	applyTime prometheus.Histogram
	applyErrs *prometheus.CounterVec // kind: transient, permanent
	inFlight  prometheus.Gauge
	backlog   prometheus.Gauge
	pending   prometheus.Gauge
	oldest    prometheus.Gauge
	// undelivered is each shard's oldest entry not yet delivered, by age.
	undelivered *prometheus.GaugeVec
	deadLetter  prometheus.Gauge
	breaker     prometheus.Gauge
	claimed     prometheus.Counter
	lost        prometheus.Counter
	ackErrs     prometheus.Counter

	checkpoints    prometheus.Counter
	checkpointErrs prometheus.Counter
}

// Label values of tally_projector_events_total.
const (
	outcomeDeadLettered = "dead_lettered"

	kindTransient = "transient"
	kindPermanent = "permanent"
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_projector_events_total",
			Help: "Stream entries handled, by outcome (recorded, duplicate, rejected, dead_lettered) and reason (for rejected and dead_lettered).",
		}, []string{"outcome", "reason"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tally_projector_batch_size",
			Help:    "Events per Append call.",
			Buckets: []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000},
		}),
		applyTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tally_projector_apply_seconds",
			Help:    "Latency of one Append call, successful or not.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		applyErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_projector_apply_errors_total",
			Help: "Failed Append calls, by kind (transient: retried; permanent: the batch is bisected).",
		}, []string{"kind"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tally_projector_batches_in_flight",
			Help: "Batches being applied now, each in its own transaction: at most the configured workers.",
		}),
		backlog: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tally_projector_backlog",
			Help: "Entries in the streams (XLEN summed over shards): enqueued and not yet applied.",
		}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tally_projector_pending",
			Help: "Entries delivered to a consumer and not yet acknowledged, summed over shards.",
		}),
		oldest: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tally_projector_oldest_pending_age_seconds",
			Help: "Age of the oldest pending entry, since it was enqueued (0 when none is pending).",
		}),
		undelivered: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tally_projector_oldest_undelivered_age_seconds",
			Help: "Per shard, age of the oldest entry no projector was given yet, since it was enqueued (0 when every entry was delivered): how long a vote waits before any projector reads it.",
		}, []string{"shard"}),
		deadLetter: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tally_projector_dead_letters",
			Help: "Entries in the dead-letter streams, summed over shards.",
		}),
		breaker: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tally_projector_breaker_state",
			Help: "State of the PostgreSQL circuit breaker: 0 closed, 1 half-open, 2 open.",
		}),
		claimed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tally_projector_claimed_total",
			Help: "Pending entries taken over from a consumer that left them idle (XAUTOCLAIM).",
		}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tally_projector_lost_total",
			Help: "Pending entries Redis reported as deleted before they were applied: they cannot be recovered from the stream.",
		}),
		ackErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tally_projector_ack_errors_total",
			Help: "Entries of committed batches whose acknowledgement failed; they stay pending, are claimed again after the min idle time and answer duplicate.",
		}),
	}
	m.checkpoints, m.checkpointErrs = checkpointCounters()
	if err := registerAll(reg, m.events, m.batchSize, m.applyTime, m.applyErrs, m.inFlight,
		m.backlog, m.pending, m.oldest, m.undelivered, m.deadLetter, m.breaker, m.claimed, m.lost, m.ackErrs, m.checkpoints, m.checkpointErrs); err != nil {
		return nil, err
	}
	return m, nil
}

// checkpointCounters are the series of the signing of checkpoints
// (checkpoints.go).
func checkpointCounters() (signed, failed prometheus.Counter) {
	return prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tally_projector_checkpoints_signed_total",
			Help: "Checkpoints of the polls' logs signed and stored (with a log signer key).",
		}), prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tally_projector_checkpoint_errors_total",
			Help: "Failures to list, sign or store checkpoints; the heads are signed again at the next interval.",
		})
}

func registerAll(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
