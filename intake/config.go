package intake

import (
	"time"

	"tally/credential"
)

// Config tunes a Server. The zero value of a field means its default; a
// bound that may bound nothing takes NoBound (-1) for that.
type Config struct {
	// Listen is the TCP address Run serves on. Default "127.0.0.1:8080".
	Listen string
	// AdminListen, when set, is the TCP address Run serves /healthz,
	// /readyz and /metrics on as well, in plain HTTP and apart from
	// Listen's bounds, so that probes and scrapes are answered while the
	// data routes are saturated; Listen then serves no /metrics. It has
	// bounds of its own (ServeAdmin): a few connections per client address,
	// closed after a short idle time. Keep it on a private network.
	// Default "": none, and Listen serves /metrics.
	AdminListen string
	// Pprof serves the Go runtime's profiles (net/http/pprof) under
	// /debug/pprof/ on the admin listener, which it needs, to clients on
	// the loopback interface only (package profiling). Default false.
	Pprof bool
	// TLSCertFile and TLSKeyFile, both set, make Serve speak TLS 1.2 or
	// later (HTTP/2 or HTTP/1.1) with the PEM certificate chain and key in
	// those files, reloaded when they change on disk (see tls.go). Both
	// empty (the default) serve plain HTTP; one without the other is an
	// error.
	TLSCertFile string
	TLSKeyFile  string

	// Rate is the sustained number of votes per second one principal may
	// enqueue. Default 5.
	Rate float64
	// Burst is the number of votes one principal may enqueue at once before
	// Rate applies. Default 10.
	Burst int
	// MaxBacklog bounds the entries waiting in one stream shard: a vote that
	// would take the shard past it is refused with 503. Default 1,000,000.
	MaxBacklog int64
	// BacklogRetryAfter is the Retry-After of a backlog refusal. Default 2s.
	BacklogRetryAfter time.Duration
	// IdempotencyWindow is how long Redis keeps the record of a client
	// event id. Default 24h.
	IdempotencyWindow time.Duration

	// WaitReplicas, when above zero, makes a vote wait for WAIT to confirm
	// the write on that many replicas before 202; unconfirmed is 503.
	// Default 0: Redis' own acknowledgement (with appendfsync always, the
	// documented durability) is enough. WAIT runs in the pipeline of the
	// scripts it confirms, on their connection; on a Redis Cluster each
	// master's votes go in a pipeline of their own on that master, with
	// their WAIT.
	WaitReplicas int
	// WaitTimeout bounds WAIT. Default 500ms.
	WaitTimeout time.Duration

	// EnqueuePipelines bounds the Redis pipelines of enqueue scripts under
	// way at once; votes that arrive meanwhile share the next pipeline.
	// Default 2: fewer, fuller pipelines cost both intake and Redis less
	// per vote (a write and a read each per pipeline), and two still
	// overlap one round trip with the next (see BENCHMARKS.md).
	EnqueuePipelines int
	// EnqueueBatch bounds the scripts of one pipeline. Default 128.
	EnqueueBatch int

	// RequestTimeout bounds the work of one request. Default 3s.
	RequestTimeout time.Duration
	// RedisTimeout bounds one Redis round trip. Default 1s.
	RedisTimeout time.Duration
	// PostgresTimeout bounds one PostgreSQL query (event status, results).
	// Default 2s.
	PostgresTimeout time.Duration

	// AuthFailureRate is the sustained number of failed authentications
	// (a bearer token invalid, expired or revoked) per second one client
	// address may make, and AuthFailureBurst how many it may make at once.
	// Beyond them a request from that address gets 429 before its token's
	// signature is checked. The address is the connection's (a proxy's,
	// behind one).
	// Defaults 10 and 20; a rate of +Inf turns the limit off.
	AuthFailureRate  float64
	AuthFailureBurst int
	// ReadRate is the sustained number of reads (GET /v1/votes/{event_id},
	// GET /v1/polls/{poll_id}/results) per second one principal may make,
	// and ReadBurst how many it may make at once; beyond them a read gets
	// 429. Defaults 10 and 20; a rate of +Inf turns the limit off.
	ReadRate  float64
	ReadBurst int
	// LimitEntries bounds each table of the limits kept in memory (client
	// addresses, principals): beyond it, entries are forgotten, which lets
	// them start afresh. Default 100,000.
	LimitEntries int

	// ReadCacheTTL is how long a poll's results and the answer of /readyz
	// are reused: reads of one poll within it cost PostgreSQL one query,
	// and /readyz callers within it share one check. Default 1s.
	ReadCacheTTL time.Duration

	// CatalogRefresh is the period of the check of the catalog's change
	// log (one indexed query when nothing changed), the safety net beside
	// LISTEN tally_catalog. Default 30s.
	CatalogRefresh time.Duration

	// CatalogLoadTimeout bounds the wait for the first load of the catalog
	// at start, which reads it in pages, each under PostgresTimeout. Past
	// it intake logs how many polls it read and serves, not ready, while
	// the load goes on from there. Default 1m.
	CatalogLoadTimeout time.Duration

	// Credentials verifies the bearer tokens that verify themselves
	// (package credential): tally's own, signed with a credential key, and
	// an OpenID Connect issuer's. Nil: no token is taken. Serve runs its Run (the issuers' keys) beside its other
	// background work: nothing else should run it, or its issuers' Run.
	Credentials *credential.Verifier
	// CredentialKeyIDs are the ids of the credential keys Credentials
	// holds for tally's own tokens, so that the 401 of a token of tally's
	// signed by another key says so and names that key (a second key made
	// by mistake is the usual cause). Empty: that 401 says only that the
	// token is invalid.
	CredentialKeyIDs []string
	// TokenKey signs the credentials POST /v1/principals issues. Default
	// nil: that route adds nobody and answers 501 not-configured.
	TokenKey *credential.Key
	// AddAdminsOverHTTP lets an admin add admins through POST
	// /v1/principals. Default false: that route adds voters only, and
	// admins are added by an operator (tally principal add --role admin).
	// Either way an admin added over HTTP has tokens that expire no later
	// than the token of the admin that added it.
	AddAdminsOverHTTP bool

	// LedgerCheck, when true, asks the ledger whether a vote's event id
	// is new when Redis may no longer hold the principal's records, so
	// that a late retry answers 202 with its status and a reused key 409
	// at once. Off by default. Its rule and cost: ledger_check.go.
	LedgerCheck bool

	// BreakerFailures is the number of consecutive Redis failures that opens
	// the circuit breaker. Default 5.
	BreakerFailures int
	// BreakerOpenFor is how long the breaker stays open before it lets a
	// trial request through; it is also the Retry-After while open.
	// Default 5s.
	BreakerOpenFor time.Duration

	// ReadHeaderTimeout, ReadTimeout and WriteTimeout are the http.Server
	// timeouts. Defaults 2s, 5s and 10s. A body that stops arriving within
	// ReadTimeout is answered 408.
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	// IdleTimeout is how long a keep-alive connection may wait for its next
	// request. Default 30s: an idle connection holds one of MaxConns, a
	// goroutine and its buffers, so an idle client gives them back within
	// half a minute, while a client that votes steadily keeps its
	// connection. A proxy in front of intake should close its idle
	// connections sooner, or it may send a request on one intake is
	// closing.
	IdleTimeout time.Duration
	// MaxConns bounds the connections open at once; a connection beyond it
	// waits in the kernel's accept queue until another closes. Default
	// 10,000; keep it under the open-file limit (ulimit -n), which the
	// PostgreSQL and Redis pools share.
	MaxConns int
	// MaxConnsPerAddr bounds the connections open at once from one client
	// address (IPv6: one /64), so that one client cannot hold every one of
	// MaxConns. A connection beyond it is answered 503
	// too-many-connections (over TLS: closed unanswered) and closed.
	// Default 256; NoBound: no bound, for an intake behind a proxy whose
	// connections all come from its few addresses.
	MaxConnsPerAddr int
	// MaxHeaderBytes bounds the request headers. Default 16 KiB.
	MaxHeaderBytes int
	// ShutdownTimeout bounds the drain of requests in flight once Run's
	// context is cancelled. Default 10s.
	ShutdownTimeout time.Duration

	// MaxLiveViewers bounds the live streams (GET /v1/polls/{poll_id}/live)
	// open at once; beyond it a stream is refused with 503 and
	// Retry-After (the page still shows the figures at load). Each holds a
	// connection of MaxConns, so it must stay below MaxConns, which keeps
	// connections for votes. Default: half of MaxConns (5,000).
	MaxLiveViewers int
	// MaxLivePerAddr and MaxLivePerPrincipal bound the live streams open
	// at once from one client address (IPv6: one /64) and, for streams
	// with a token, of one principal, so that one client cannot take every
	// one of MaxLiveViewers. Beyond them a stream is refused with 429 and
	// Retry-After. Defaults 100 (a NAT's viewers share an address) and 10;
	// NoBound: no bound.
	MaxLivePerAddr      int
	MaxLivePerPrincipal int
	// LiveHeartbeat is the period of the comment a live stream sends while
	// it has no event to send, so that proxies keep it open. Default 15s.
	LiveHeartbeat time.Duration
	// LiveInterval is the least time between two reads of a poll's
	// figures for its live streams: the appends notified within it share
	// one read. Default 200ms.
	LiveInterval time.Duration
	// LiveIdle is how long the listener of the live streams (one
	// PostgreSQL connection) outlives the last stream. Default 30s.
	LiveIdle time.Duration
}

// NoBound is the value of a bound that bounds nothing
// (Config.MaxConnsPerAddr, MaxLivePerAddr, MaxLivePerPrincipal). Zero is
// the default, as in every field.
const NoBound = -1

// DefaultConfig returns the configuration with every default filled in.
func DefaultConfig() Config {
	return Config{
		Listen:              "127.0.0.1:8080",
		Rate:                5,
		Burst:               10,
		MaxBacklog:          1_000_000,
		BacklogRetryAfter:   2 * time.Second,
		IdempotencyWindow:   24 * time.Hour,
		WaitTimeout:         500 * time.Millisecond,
		EnqueuePipelines:    2,
		EnqueueBatch:        128,
		RequestTimeout:      3 * time.Second,
		RedisTimeout:        time.Second,
		PostgresTimeout:     2 * time.Second,
		AuthFailureRate:     10,
		AuthFailureBurst:    20,
		ReadRate:            10,
		ReadBurst:           20,
		LimitEntries:        100_000,
		ReadCacheTTL:        time.Second,
		CatalogRefresh:      30 * time.Second,
		CatalogLoadTimeout:  time.Minute,
		BreakerFailures:     5,
		BreakerOpenFor:      5 * time.Second,
		ReadHeaderTimeout:   2 * time.Second,
		ReadTimeout:         5 * time.Second,
		WriteTimeout:        10 * time.Second,
		IdleTimeout:         30 * time.Second,
		MaxConns:            10_000,
		MaxConnsPerAddr:     256,
		MaxHeaderBytes:      16 << 10,
		ShutdownTimeout:     10 * time.Second,
		MaxLiveViewers:      5_000, // half of MaxConns
		MaxLivePerAddr:      100,
		MaxLivePerPrincipal: 10,
		LiveHeartbeat:       15 * time.Second,
		LiveInterval:        200 * time.Millisecond,
		LiveIdle:            30 * time.Second,
	}
}

// withDefaults fills every zero field with its default; MaxLiveViewers
// takes half of MaxConns.
func (c Config) withDefaults() Config {
	def := DefaultConfig()
	orDefault(&c.Listen, def.Listen)
	orDefault(&c.Rate, def.Rate)
	orDefault(&c.Burst, def.Burst)
	orDefault(&c.MaxBacklog, def.MaxBacklog)
	orDefault(&c.BacklogRetryAfter, def.BacklogRetryAfter)
	orDefault(&c.IdempotencyWindow, def.IdempotencyWindow)
	orDefault(&c.WaitTimeout, def.WaitTimeout)
	orDefault(&c.EnqueuePipelines, def.EnqueuePipelines)
	orDefault(&c.EnqueueBatch, def.EnqueueBatch)
	orDefault(&c.RequestTimeout, def.RequestTimeout)
	orDefault(&c.RedisTimeout, def.RedisTimeout)
	orDefault(&c.PostgresTimeout, def.PostgresTimeout)
	orDefault(&c.AuthFailureRate, def.AuthFailureRate)
	orDefault(&c.AuthFailureBurst, def.AuthFailureBurst)
	orDefault(&c.ReadRate, def.ReadRate)
	orDefault(&c.ReadBurst, def.ReadBurst)
	orDefault(&c.LimitEntries, def.LimitEntries)
	orDefault(&c.ReadCacheTTL, def.ReadCacheTTL)
	orDefault(&c.CatalogRefresh, def.CatalogRefresh)
	orDefault(&c.CatalogLoadTimeout, def.CatalogLoadTimeout)
	orDefault(&c.BreakerFailures, def.BreakerFailures)
	orDefault(&c.BreakerOpenFor, def.BreakerOpenFor)
	orDefault(&c.ReadHeaderTimeout, def.ReadHeaderTimeout)
	orDefault(&c.ReadTimeout, def.ReadTimeout)
	orDefault(&c.WriteTimeout, def.WriteTimeout)
	orDefault(&c.IdleTimeout, def.IdleTimeout)
	orDefault(&c.MaxConns, def.MaxConns)
	orDefault(&c.MaxConnsPerAddr, def.MaxConnsPerAddr)
	orDefault(&c.MaxHeaderBytes, def.MaxHeaderBytes)
	orDefault(&c.ShutdownTimeout, def.ShutdownTimeout)
	orDefault(&c.MaxLiveViewers, max(c.MaxConns/2, 1))
	orDefault(&c.MaxLivePerAddr, def.MaxLivePerAddr)
	orDefault(&c.MaxLivePerPrincipal, def.MaxLivePerPrincipal)
	orDefault(&c.LiveHeartbeat, def.LiveHeartbeat)
	orDefault(&c.LiveInterval, def.LiveInterval)
	orDefault(&c.LiveIdle, def.LiveIdle)
	return c
}

// orDefault sets *v to def when *v is zero.
func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}
