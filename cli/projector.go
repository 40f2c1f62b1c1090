package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	ucli "github.com/urfave/cli/v2"
	"golang.org/x/mod/sumdb/note"

	"tally/audit"
	"tally/internal/profiling"
	"tally/ledger"
	"tally/projector"
)

func projectorCommand() *ucli.Command {
	cfg := projector.DefaultConfig()
	bound := projectorFlags(&cfg)
	fields := boundFields(&cfg, bound)
	flags := append([]ucli.Flag{startupWaitFlag(), allowSuperuserFlag(), &flagLogKey, &flagMetricsListen, &flagProjectorPprof}, bound...)
	return &ucli.Command{
		Name:  "projector",
		Usage: "run the projector daemon: apply queued votes to the ledger in batches, one transaction each",
		Description: "projector joins the consumer group of the streams (creating it when missing), applies bounded\n" +
			"batches in one transaction each, and acknowledges and deletes the entries only after COMMIT. It claims\n" +
			"entries left pending by a dead consumer after --min-idle, dead-letters what cannot be applied, and\n" +
			"pauses while PostgreSQL fails. Up to --workers batches are applied at once, each in its own\n" +
			"transaction; the ledger decides between them as between several projectors. SIGTERM or SIGINT stops\n" +
			"it: it stops reading, lets the batches in flight commit within --shutdown-grace, acknowledges what\n" +
			"committed and exits 0.\n\n" +
			"Run several with distinct --consumer names to share the work. --metrics-listen serves /metrics and\n" +
			"/healthz. With --log-key, it signs each poll's log head that changed, every --checkpoint-interval,\n" +
			"and stores the checkpoint (tally log checkpoint prints it; tally export --checkpoints writes them).",
		Flags:  redisFlags(flags...),
		Action: func(c *ucli.Context) error { return runProjector(c, cfg, fields) },
	}
}

// The flags of tally projector that are not projector.Config fields.
var (
	flagLogKey = ucli.StringFlag{Name: "log-key", EnvVars: []string{"TALLY_PROJECTOR_LOG_KEY"},
		Usage: "signer key `FILE` (tally log key generate): sign a checkpoint of each poll's log when it changed (empty: none)"}
	flagMetricsListen = ucli.StringFlag{Name: "metrics-listen", EnvVars: []string{"TALLY_PROJECTOR_METRICS_LISTEN"},
		Usage: "TCP `ADDR`ess to serve /metrics and /healthz on (empty: none)"}
	flagProjectorPprof = ucli.BoolFlag{Name: "pprof", EnvVars: []string{"TALLY_PROJECTOR_PPROF"},
		Usage: "also serve the Go runtime's profiles (net/http/pprof) under /debug/pprof/ on --metrics-listen, " +
			"which it needs, to clients on the loopback interface only"}
)

// projectorSettings binds tally projector's flags to projector.Config.
var projectorSettings = settings{env: "TALLY_PROJECTOR_"}

// projectorFlags are the flags bound to the fields of cfg, whose values
// are their defaults.
func projectorFlags(cfg *projector.Config) []ucli.Flag {
	s := projectorSettings
	return []ucli.Flag{
		s.string("consumer", &cfg.Consumer, "`NAME` in the consumer group, unique per live projector (default: host-pid)"),
		s.int("batch-size", &cfg.BatchSize, "most entries applied in one transaction"),
		s.duration("batch-wait", &cfg.BatchWait, "how long a batch waits to fill before it is applied anyway"),
		s.int("workers", &cfg.Workers, fmt.Sprintf("batches applied at once, each in its own transaction and PostgreSQL connection (1-%d)", projector.MaxWorkers)),
		s.duration("min-idle", &cfg.MinIdle, "how long an entry stays pending on a consumer before another claims it"),
		s.duration("claim-interval", &cfg.ClaimInterval, "how often idle pending entries are looked for (0: a quarter of --min-idle)"),
		s.int("max-deliveries", &cfg.MaxDeliveries, "deliveries after which an entry is dead-lettered instead of applied"),
		s.int("max-attempts", &cfg.MaxAttempts, "tries of a batch on transient PostgreSQL errors before it is left pending"),
		s.duration("backoff-min", &cfg.BackoffMin, "first wait between tries (doubles, with jitter)"),
		s.duration("backoff-max", &cfg.BackoffMax, "longest wait between tries"),
		s.duration("apply-timeout", &cfg.ApplyTimeout, "bound on one batch's transaction"),
		s.int("breaker-failures", &cfg.BreakerFailures, "consecutive transient failures that open the PostgreSQL circuit breaker"),
		s.duration("breaker-open-for", &cfg.BreakerOpenFor, "how long the breaker stays open before a probe batch"),
		s.duration("shutdown-grace", &cfg.ShutdownGrace, "how long the batches in flight may take to commit at shutdown"),
		s.duration("stats-interval", &cfg.StatsInterval, "how often the backlog and dead-letter gauges are refreshed"),
		s.duration("checkpoint-interval", &cfg.CheckpointInterval, "how often, with --log-key, the changed logs are signed"),
	}
}

// runProjector is tally projector: it checks cfg (the flags bound to it;
// fields maps its fields to their flags) before it connects anywhere,
// connects, and runs the projector until ctx ends.
func runProjector(c *ucli.Context, cfg projector.Config, fields map[string]string) error {
	log, err := logger(c)
	if err != nil {
		return err
	}
	if err := checkSettings(c, &cfg, projector.DefaultConfig(), fields, cfg.Validate); err != nil {
		return err
	}
	if c.Bool(flagProjectorPprof.Name) && c.String(flagMetricsListen.Name) == "" {
		return errors.New("--pprof: the profiles are served on --metrics-listen only: give it an address too (on the loopback interface)")
	}
	if cfg.LogSigner, err = logSigner(c.String(flagLogKey.Name)); err != nil {
		return err
	}
	setupDaemon(log)
	cs, err := openConns(c, ledger.Config{Logger: log, MaxBatch: max(cfg.BatchSize, 1)}, c.Duration(flagStartupWait.Name))
	if err != nil {
		return err
	}
	defer cs.close()
	if err := checkDaemonRole(c, cs.store, log, "projector"); err != nil {
		return err
	}
	reg := newRegistry()
	p, err := projector.New(cs.store, cs.rdb, cs.keys, cfg, log, reg)
	if err != nil {
		return flagErrors(err, fields)
	}
	if conns := cs.pool.Config().MaxConns; int(conns) < cfg.Workers {
		log.LogAttrs(c.Context, slog.LevelWarn, "fewer PostgreSQL connections than workers: the extra workers wait for a connection; add pool_max_conns to --database-url",
			slog.String("component", "projector"), slog.Int("workers", cfg.Workers), slog.Int("pool_max_conns", int(conns)))
	}
	if addr := c.String(flagMetricsListen.Name); addr != "" {
		stop, err := serveMetrics(c.Context, addr, metricsMux(reg, c.Bool(flagProjectorPprof.Name)), log)
		if err != nil {
			return err
		}
		defer stop()
	}
	notifyReady(c.Context, log, "projector")
	return p.Run(c.Context)
}

// logSigner reads the signer key of --log-key; none when path is empty.
func logSigner(path string) (note.Signer, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--log-key: %w (tally log key generate --name NAME --out FILE writes a signer key)", err)
	}
	s, err := audit.NewSigner(string(b))
	if err != nil {
		return nil, fmt.Errorf("--log-key %s: %w", path, err)
	}
	return s, nil
}

// metricsMux serves /metrics of reg and /healthz, and with pprof the
// profiles (package profiling).
func metricsMux(reg *prometheus.Registry, pprof bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
	if pprof {
		profiling.Register(mux)
	}
	return mux
}

// serveMetrics serves mux on addr until stop is called.
func serveMetrics(ctx context.Context, addr string, mux *http.ServeMux, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.LogAttrs(ctx, slog.LevelError, "metrics server failed", slog.String("component", "projector"), slog.String("error", err.Error()))
		}
	}()
	log.LogAttrs(ctx, slog.LevelInfo, "serving metrics", slog.String("component", "projector"), slog.String("addr", ln.Addr().String()))
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
	}, nil
}
