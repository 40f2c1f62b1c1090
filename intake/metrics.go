package intake

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"

	"tally/intake/internal/admin"
	"tally/intake/internal/live"
)

// metrics are intake's Prometheus metrics. Labels are bounded: route
// templates, status codes, enqueue outcomes, the names of the limits kept
// in memory (never a client address or a principal).
type metrics struct {
	requests        *prometheus.CounterVec   // route, code
	duration        *prometheus.HistogramVec // route
	enqueue         *prometheus.HistogramVec // outcome
	batchSize       prometheus.Histogram
	rateLimited     prometheus.Counter
	replays         prometheus.Counter
	backlogRefusals prometheus.Counter
	breakerState    prometheus.Gauge
	// While PostgreSQL does not answer (see degraded.go).
	postgresReachable prometheus.Gauge
	degraded          *prometheus.CounterVec // answer
	staleResults      prometheus.Counter     // degraded's children
	pendingFromQueue  prometheus.Counter
	resultsReads      prometheus.Counter
	authLimited       prometheus.Counter
	readLimited       prometheus.Counter
	limitEvictions    *prometheus.CounterVec // limit
	// bounds counts what the bounds on what a client holds open refused
	// (package holds), by bound; connsRefused is its child of
	// boundConnsPerAddr.
	bounds       *prometheus.CounterVec
	connsRefused prometheus.Counter
	connErrors   *prometheus.CounterVec // kind (conn_errors.go)

	// The follower of the catalog's change log (changes.go): whole loads
	// of the catalog, and changes applied one by one.
	catalogLoads   prometheus.Counter
	catalogChanges prometheus.Counter

	// Intake's own backlog (backlog.go): the entries of each stream shard
	// as the last readiness check read them, and the batcher whose held
	// votes heldVotes reads.
	streamEntries *prometheus.GaugeVec // shard
	heldVotes     prometheus.GaugeFunc
	heldBy        atomic.Pointer[batcher]

	// credentialVec counts the signed credentials checked, by result;
	// credentials are its children by result.
	credentialVec *prometheus.CounterVec
	credentials   map[string]prometheus.Counter

	// ledgerCheckVec counts the ledger checks of new event ids the
	// enqueue script could not rule out (ledger_check.go), by outcome;
	// ledgerChecks are its children by outcome.
	ledgerCheckVec *prometheus.CounterVec
	ledgerChecks   map[string]prometheus.Counter

	// Children of the vectors, resolved once instead of on every request:
	// by route template, and by enqueue outcome.
	routes   map[string]*routeStats
	outcomes map[outcome]*lazyObserver
}

// lazyObserver is a child of a histogram vector, resolved on its first use,
// so that only the label values that were used appear.
type lazyObserver struct {
	vec   *prometheus.HistogramVec
	label string
	once  sync.Once
	child prometheus.Observer
}

func (l *lazyObserver) Observe(v float64) {
	l.once.Do(func() { l.child = l.vec.WithLabelValues(l.label) })
	l.child.Observe(v)
}

// routeStats are the metrics of one route template. The request counter
// of each status code is resolved on its first use, so that only codes
// that were answered appear.
type routeStats struct {
	route    string
	requests *prometheus.CounterVec
	duration *lazyObserver
	byCode   [600]atomic.Pointer[prometheus.Counter]
}

func (m *metrics) route(route string) *routeStats {
	if rm := m.routes[route]; rm != nil {
		return rm
	}
	return m.routes[routeOther]
}

// request counts one request answered with code.
func (rm *routeStats) request(code int) {
	if code < 0 || code >= len(rm.byCode) {
		rm.requests.WithLabelValues(rm.route, strconv.Itoa(code)).Inc()
		return
	}
	c := rm.byCode[code].Load()
	if c == nil {
		child := rm.requests.WithLabelValues(rm.route, strconv.Itoa(code))
		c = &child
		rm.byCode[code].Store(c)
	}
	(*c).Inc()
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tally", Subsystem: "intake", Name: "requests_total",
			Help: "HTTP requests answered, by route template and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "tally", Subsystem: "intake", Name: "request_duration_seconds",
			Help:    "Time to answer an HTTP request, by route template; not observed for live streams, which last as long as their viewer.",
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
		ledgerCheckVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tally", Subsystem: "intake", Name: "ledger_checks_total",
			Help: "New event ids looked up in the ledger because the principal may have events whose idempotency records expired or were lost, " +
				"by outcome: new (enqueued), replay (202 with the ledger's status), conflict (409), error (the ledger did not answer: the vote is enqueued and the ledger decides it, or, when the request ran out of time, answered 503 not-queued).",
		}, []string{"outcome"}),
		credentialVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tally", Subsystem: "intake", Name: "credentials_total",
			Help: "Bearer credentials checked in memory (no database involved), by result: valid, invalid (a bad signature, key, issuer, audience or time: 401), " +
				"revoked (the principal revoked or the key retired, in the revocations intake holds: 401), unavailable (the revocations or the issuer's keys not loaded yet: 503). " +
				"Tokens of the form issued before signed credentials count here only when revoked.",
		}, []string{"result"}),
		breakerState: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "tally", Subsystem: "intake", Name: "redis_breaker_state",
			Help: "State of the Redis circuit breaker: 0 closed, 1 half-open, 2 open.",
		}),
	}
	m.authLimited, m.readLimited, m.limitEvictions = newLimitMetrics()
	m.bounds, m.connErrors = newBoundMetrics()
	m.catalogLoads, m.catalogChanges = newCatalogMetrics()
	m.connsRefused = m.bounds.WithLabelValues(boundConnsPerAddr)
	m.makeChildren()
	var errs []error
	for _, c := range append([]prometheus.Collector{m.requests, m.duration, m.enqueue, m.batchSize, m.rateLimited, m.replays, m.backlogRefusals, m.breakerState, m.ledgerCheckVec, m.credentialVec,
		m.authLimited, m.readLimited, m.limitEvictions, m.bounds, m.connErrors,
		m.catalogLoads, m.catalogChanges}, slices.Concat(m.newDegradedMetrics(), m.newBacklogMetrics())...) {
		if err := reg.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("register intake metrics: %w", err)
	}
	return m, nil
}

// makeChildren makes, once, the per-route, per-outcome and per-check
// children the hot path uses without a label lookup.
func (m *metrics) makeChildren() {
	m.routes = map[string]*routeStats{}
	for _, route := range []string{routeVotes, routeVote, routeResults, routeCheckpoint, routeConsistency, routeHealth, routeReady, routeMetrics, routeOpenAPI, live.RoutePage, live.RouteStream,
		admin.RoutePolls, admin.RoutePoll, admin.RoutePollClose, admin.RoutePrincipals, admin.RoutePrincipalRevoke, routeOther} {
		m.routes[route] = &routeStats{route: route, requests: m.requests, duration: &lazyObserver{vec: m.duration, label: route}}
	}
	m.credentials = map[string]prometheus.Counter{}
	for _, r := range credentialResults {
		m.credentials[r] = m.credentialVec.WithLabelValues(r)
	}
	m.ledgerChecks = map[string]prometheus.Counter{}
	for _, o := range checkOutcomes {
		m.ledgerChecks[o] = m.ledgerCheckVec.WithLabelValues(o)
	}
	m.outcomes = map[outcome]*lazyObserver{}
	for _, o := range outcomes {
		m.outcomes[o] = &lazyObserver{vec: m.enqueue, label: string(o)}
	}
}

// newDegradedMetrics makes the metrics of what intake does while
// PostgreSQL does not answer (see degraded.go) and returns them to
// register.
func (m *metrics) newDegradedMetrics() []prometheus.Collector {
	m.postgresReachable = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "tally", Subsystem: "intake", Name: "postgres_reachable",
		Help: "1 while PostgreSQL answers intake's lookups; 0 from a failed lookup until one succeeds again.",
	})
	m.degraded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tally", Subsystem: "intake", Name: "degraded_answers_total",
		Help: "Answers given without PostgreSQL because it did not answer: results last read (stale_results), a vote's status pending from its record in Redis (pending_from_queue).",
	}, []string{"answer"})
	m.resultsReads = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "tally", Subsystem: "intake", Name: "results_queries_total",
		Help: "Queries of a poll's results sent to PostgreSQL; the reads of one poll within the read cache TTL share one.",
	})
	m.staleResults = m.degraded.WithLabelValues("stale_results")
	m.pendingFromQueue = m.degraded.WithLabelValues("pending_from_queue")
	return []prometheus.Collector{m.postgresReachable, m.degraded, m.resultsReads}
}

// newLimitMetrics are the counters of the limits kept in memory.
func newLimitMetrics() (authLimited, readLimited prometheus.Counter, evictions *prometheus.CounterVec) {
	return prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "tally", Subsystem: "intake", Name: "auth_rate_limited_total",
			Help: "Requests refused with 429 before authentication: their client address had too many failed authentications.",
		}), prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "tally", Subsystem: "intake", Name: "read_rate_limited_total",
			Help: "Reads refused with 429 by the per-principal read limit.",
		}), prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tally", Subsystem: "intake", Name: "limit_evictions_total",
			Help: "Entries of an in-memory limit table (auth_failures, reads) forgotten before their bucket was full again, because the table was at its bound.",
		}, []string{"limit"})
}

// The bounds on what a client holds open, the label of their refusals.
const (
	boundConnsPerAddr     = "conns_per_addr"
	boundLive             = "live"
	boundLivePerAddr      = "live_per_addr"
	boundLivePerPrincipal = "live_per_principal"
)

func newBoundMetrics() (bounds, connErrors *prometheus.CounterVec) {
	bounds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tally", Subsystem: "intake", Name: "bound_refusals_total",
		Help: "Connections and live streams refused for a bound on what is held open, by bound: conns_per_addr (a connection beyond the bound per client address, " +
			"answered 503 too-many-connections and closed), live (a stream beyond the bound on live streams), live_per_addr and live_per_principal " +
			"(beyond the bounds per client address and per principal: 429).",
	}, []string{"bound"})
	for _, b := range []string{boundConnsPerAddr, boundLive, boundLivePerAddr, boundLivePerPrincipal} {
		bounds.WithLabelValues(b)
	}
	connErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tally", Subsystem: "intake", Name: "connection_errors_total",
		Help: "Errors of connections rather than requests, by kind: tls_handshake, http2 (such as a bad preface), accept, other. " +
			"The log has the first of each kind and a summary a minute, not a line each.",
	}, []string{"kind"})
	return bounds, connErrors
}

// newCatalogMetrics are the counters of the follower of the catalog's
// change log.
func newCatalogMetrics() (loads, changes prometheus.Counter) {
	return prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "tally", Subsystem: "intake", Name: "catalog_loads_total",
			Help: "Loads of the whole catalog (polls and revocations): one at start, and one each time intake fell behind the trimmed change log.",
		}), prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "tally", Subsystem: "intake", Name: "catalog_changes_applied_total",
			Help: "Changes of the catalog's change log applied, each reading again only the poll, principal or key it names.",
		})
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

// outcome is the enqueue duration histogram of o.
func (m *metrics) outcome(o outcome) prometheus.Observer {
	if h := m.outcomes[o]; h != nil {
		return h
	}
	return m.enqueue.WithLabelValues(string(o))
}
