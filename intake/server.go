package intake

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"tally/ledger"
	"tally/stream"
)

// This file owns the daemon's lifecycle: New wires the stages together,
// Run and Serve serve until their context ends, and drain stops serving.

// Server is the intake daemon. Create it with New; serve with Run or Serve.
type Server struct {
	cfg        Config
	store      *ledger.Store
	rdb        redis.UniversalClient
	keys       stream.Keys
	log        *slog.Logger
	metrics    *metrics
	gatherer   prometheus.Gatherer // nil when reg does not gather
	breaker    *gobreaker.CircuitBreaker[any]
	batcher    *batcher
	checks     *ledgerChecks // the ledger checks of new event ids the script could not rule out
	revoked    *revocations  // the revoked principals and retired keys, in memory
	voters     *voters       // of signed credentials
	limits     *limits
	catalog    *catalog
	follow     *follower     // keeps catalog and revoked current
	pg         *pgState      // whether PostgreSQL answers intake's lookups
	results    *resultsCache // the last figures read of each poll
	ready      *readyCache   // the last answer of /readyz
	handler    http.Handler
	connErrors *connErrors // net/http's error log

	// script holds the enqueue script's arguments that are the same for
	// every vote, boxed once.
	script scriptArgs

	runOnce sync.Once
}

// New returns a Server on store and rdb. keys must match the projector's.
// Metrics are registered on reg, and /metrics serves reg when it is also a
// prometheus.Gatherer (a *prometheus.Registry is both); a nil reg gets a
// fresh registry. New does no I/O. rdb should bound each command by its
// context's deadline (redis.Options.ContextTimeoutEnabled, as tally intake
// sets it): a vote's pipeline ends at the deadline of its votes that way.
func New(cfg Config, store *ledger.Store, rdb redis.UniversalClient, keys stream.Keys, logger *slog.Logger, reg prometheus.Registerer) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if store == nil || rdb == nil {
		return nil, errors.New("intake: a ledger store and a Redis client are required")
	}
	if keys.Shards() == 0 {
		return nil, errors.New("intake: stream keys are not set; use stream.NewKeys")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, store: store, rdb: rdb, keys: keys,
		log:     logger.With(slog.String("component", "intake")),
		metrics: m, script: newScriptArgs(cfg, keys), voters: newVoters(keys),
	}
	s.gatherer, _ = reg.(prometheus.Gatherer)
	s.breaker = newBreaker(cfg, func(from, to gobreaker.State) {
		m.breakerState.Set(breakerValue(to))
		s.log.Warn("redis circuit breaker changed state",
			slog.String("from", from.String()), slog.String("to", to.String()))
	})
	s.batcher = newBatcher(rdb, cfg, m.batchSize)
	m.heldBy.Store(s.batcher)
	s.checks = newLedgerChecks(store, cfg, s.log)
	s.pg = newPGState(s.log, m.postgresReachable)
	s.results = newResultsCache()
	s.ready = &readyCache{}
	s.limits = newLimits(cfg, m)
	s.revoked = &revocations{}
	s.catalog = &catalog{}
	s.follow = newFollower(store, s.log, cfg, m, s.pg, s.catalog, s.revoked, nil)
	s.connErrors = newConnErrors(s.log, m.connErrors)
	s.handler = s.routes()
	return s, nil
}

// Handler is the HTTP handler of every route, for tests and embedding. The
// catalog is only kept current (the follower of its change log) while Run or
// Serve runs.
func (s *Server) Handler() http.Handler { return s.handler }

// Run listens on Config.Listen, and on Config.AdminListen when it is
// set, and serves until ctx is cancelled; see Listen and ServeAdmin.
func (s *Server) Run(ctx context.Context) error {
	ln, admin, err := s.Listen(ctx)
	if err != nil {
		return err
	}
	return s.ServeAdmin(ctx, ln, admin)
}

// Listen binds Config.Listen, and Config.AdminListen when it is set (admin
// is nil otherwise), for ServeAdmin. A caller that must tell a supervisor
// when intake accepts connections (tally intake under systemd) tells it
// between the two.
func (s *Server) Listen(ctx context.Context) (ln, admin net.Listener, err error) {
	if ln, err = listen(ctx, s.cfg.Listen, "the listen address"); err != nil {
		return nil, nil, err
	}
	if s.cfg.AdminListen != "" {
		if admin, err = listen(ctx, s.cfg.AdminListen, "the admin listen address"); err != nil {
			ln.Close()
			return nil, nil, err
		}
	}
	return ln, admin, nil
}

func listen(ctx context.Context, addr, setting string) (net.Listener, error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("intake: listen on %s: %w (is another process using it? set %s to another)", addr, err, setting)
	}
	return ln, nil
}

// Serve is ServeAdmin without an admin listener: ln serves every route,
// /metrics included.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	return s.ServeAdmin(ctx, ln, nil)
}

// ServeAdmin serves on ln, at most Config.MaxConns connections at once
// and Config.MaxConnsPerAddr from one client address, until ctx is
// cancelled, then stops accepting, drains the requests in flight within
// Config.ShutdownTimeout (closing whatever is left after it) and returns
// nil. It returns an error when serving failed. With Config.TLSCertFile
// it serves TLS, and a key pair it cannot load is an error naming the
// file. A Server serves once.
//
// When admin is not nil it serves /healthz, /readyz and /metrics in plain
// HTTP, apart from ln's bounds, so that probes and scrapes are answered
// while the data routes are saturated; ln then serves no /metrics (it
// keeps /healthz and /readyz, for a load balancer that probes the port
// it sends traffic to). admin has bounds of its own: 64 connections, 8
// from one client address, closed after 2 s without a request.
func (s *Server) ServeAdmin(ctx context.Context, ln, admin net.Listener) error {
	served := false
	s.runOnce.Do(func() { served = true })
	if !served {
		closeAll(ln, admin)
		return errors.New("intake: a Server serves once")
	}
	var tlsConfig *tls.Config
	if s.cfg.TLSCertFile != "" {
		var err error
		if tlsConfig, err = newTLSConfig(s.cfg.TLSCertFile, s.cfg.TLSKeyFile, s.log); err != nil {
			closeAll(ln, admin)
			return err
		}
	}
	public := s.handler
	if admin != nil {
		public = withoutMetrics(public)
	}
	srv := s.httpServer(ctx, public, tlsConfig)
	var adminSrv *http.Server
	if admin != nil {
		adminSrv = s.httpServer(ctx, s.adminRoutes(), nil)
		adminSrv.IdleTimeout = adminIdleTimeout
		adminSrv.ReadHeaderTimeout = min(adminSrv.ReadHeaderTimeout, adminIdleTimeout)
	}

	s.follow.loadAtStart(ctx)
	bgCtx, stopBackground := context.WithCancel(ctx)
	var bg sync.WaitGroup
	bg.Go(func() { s.markEpochs(bgCtx) })
	bg.Go(func() { s.follow.run(bgCtx) })
	if s.cfg.Credentials != nil {
		bg.Go(func() { s.runCredentials(bgCtx) })
	}
	bg.Go(func() { s.connErrors.run(bgCtx) })
	defer func() {
		stopBackground()
		bg.Wait()
	}()

	attrs := []slog.Attr{slog.String("addr", ln.Addr().String()),
		slog.Bool("tls", tlsConfig != nil), slog.Int("shards", s.keys.Shards()), slog.String("stream_prefix", s.keys.Prefix())}
	if admin != nil {
		attrs = append(attrs, slog.String("admin_addr", admin.Addr().String()))
	}
	s.log.LogAttrs(ctx, slog.LevelInfo, "intake serving", attrs...)
	serveErr := make(chan error, 2)
	go func() {
		serveErr <- serve(srv, limitListen(ln, s.cfg.MaxConns, s.cfg.MaxConnsPerAddr, tlsConfig != nil, s.metrics.connsRefused))
	}()
	servers := []*http.Server{srv}
	if adminSrv != nil {
		go func() {
			serveErr <- serve(adminSrv, limitListen(admin, adminMaxConns, adminMaxConnsPerAddr, false, s.metrics.connsRefused))
		}()
		servers = append(servers, adminSrv)
	}
	select {
	case err := <-serveErr:
		closeServers(servers)
		return fmt.Errorf("intake: serve: %w", err)
	case <-ctx.Done():
	}
	return s.drain(ctx, servers, serveErr)
}

// The admin listener's bounds: probes and scrapes need a few connections,
// each for a moment. So one client address holds at most
// adminMaxConnsPerAddr of its adminMaxConns, and a connection that sends
// no request for adminIdleTimeout is closed, so that idle connections
// from many addresses hold the listener for seconds, not for
// Config.IdleTimeout.
const (
	adminMaxConns        = 64
	adminMaxConnsPerAddr = 8
	adminIdleTimeout     = 2 * time.Second
)

// httpServer is the http.Server of h, with Config's timeouts.
func (s *Server) httpServer(ctx context.Context, h http.Handler, tlsConfig *tls.Config) *http.Server {
	return &http.Server{
		TLSConfig:         tlsConfig,
		Handler:           h,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    s.cfg.MaxHeaderBytes,
		ErrorLog:          s.connErrors.logger(),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
}

func closeAll(lns ...net.Listener) {
	for _, ln := range lns {
		if ln != nil {
			ln.Close()
		}
	}
}

func closeServers(servers []*http.Server) {
	for _, srv := range servers {
		srv.Close()
	}
}

// runCredentials keeps the keys of the OpenID Connect issuers intake
// trusts until ctx ends. Its only error is a Verifier whose issuers run
// already (another Server's Config holds it): they keep its keys then.
func (s *Server) runCredentials(ctx context.Context) {
	if err := s.cfg.Credentials.Run(ctx); err != nil {
		s.log.LogAttrs(ctx, slog.LevelError, "OpenID Connect issuers not run by this intake", slog.String("error", err.Error()))
	}
}

// serve serves srv on ln, over TLS when srv has a TLS config (ServeTLS
// wraps ln, so the connection cap counts connections before their
// handshake).
func serve(srv *http.Server, ln net.Listener) error {
	if srv.TLSConfig != nil {
		return srv.ServeTLS(ln, "", "")
	}
	return srv.Serve(ln)
}

// drain stops the servers once ctx is cancelled: they stop accepting,
// the requests in flight get Config.ShutdownTimeout to end, the
// connections left after it are closed, and drain waits for each
// server's Serve, the first error of which it returns.
func (s *Server) drain(ctx context.Context, servers []*http.Server, serveErr <-chan error) error {
	s.log.LogAttrs(ctx, slog.LevelInfo, "intake shutting down", slog.Duration("drain_within", s.cfg.ShutdownTimeout))
	drainCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	var shut sync.WaitGroup
	for _, srv := range servers {
		shut.Go(func() {
			if err := srv.Shutdown(drainCtx); err != nil {
				s.log.LogAttrs(ctx, slog.LevelWarn, "drain did not finish in time; closing the remaining connections",
					slog.String("error", err.Error()))
				srv.Close()
			}
		})
	}
	shut.Wait()
	var first error
	for range servers {
		if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) && first == nil {
			first = fmt.Errorf("intake: serve: %w", err)
		}
	}
	if first != nil {
		return first
	}
	s.log.LogAttrs(ctx, slog.LevelInfo, "intake stopped")
	return nil
}
