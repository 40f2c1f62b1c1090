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
	"tally/ledger"
	"tally/projector"
)

func projectorCommand() *ucli.Command {
	dur := func(name, env string, value time.Duration, usage string) *ucli.DurationFlag {
		return &ucli.DurationFlag{Name: name, EnvVars: []string{"TALLY_PROJECTOR_" + env}, Value: value, Usage: usage}
	}
	num := func(name, env string, value int, usage string) *ucli.IntFlag {
		return &ucli.IntFlag{Name: name, EnvVars: []string{"TALLY_PROJECTOR_" + env}, Value: value, Usage: usage}
	}
	def := projector.DefaultConfig()
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
		Flags: redisFlags(startupWaitFlag(), allowSuperuserFlag(),
			&ucli.StringFlag{Name: "consumer", EnvVars: []string{"TALLY_PROJECTOR_CONSUMER"},
				Usage: "`NAME` in the consumer group, unique per live projector (default: host-pid)"},
			num("batch-size", "BATCH_SIZE", def.BatchSize, "most entries applied in one transaction"),
			dur("batch-wait", "BATCH_WAIT", def.BatchWait, "how long a batch waits to fill before it is applied anyway"),
			num("workers", "WORKERS", def.Workers, fmt.Sprintf("batches applied at once, each in its own transaction and PostgreSQL connection (1-%d)", projector.MaxWorkers)),
			dur("min-idle", "MIN_IDLE", def.MinIdle, "how long an entry stays pending on a consumer before another claims it"),
			dur("claim-interval", "CLAIM_INTERVAL", def.ClaimInterval, "how often idle pending entries are looked for (0: a quarter of --min-idle)"),
			num("max-deliveries", "MAX_DELIVERIES", def.MaxDeliveries, "deliveries after which an entry is dead-lettered instead of applied"),
			num("max-attempts", "MAX_ATTEMPTS", def.MaxAttempts, "tries of a batch on transient PostgreSQL errors before it is left pending"),
			dur("backoff-min", "BACKOFF_MIN", def.BackoffMin, "first wait between tries (doubles, with jitter)"),
			dur("backoff-max", "BACKOFF_MAX", def.BackoffMax, "longest wait between tries"),
			dur("apply-timeout", "APPLY_TIMEOUT", def.ApplyTimeout, "bound on one batch's transaction"),
			num("breaker-failures", "BREAKER_FAILURES", def.BreakerFailures, "consecutive transient failures that open the PostgreSQL circuit breaker"),
			dur("breaker-open-for", "BREAKER_OPEN_FOR", def.BreakerOpenFor, "how long the breaker stays open before a probe batch"),
			dur("shutdown-grace", "SHUTDOWN_GRACE", def.ShutdownGrace, "how long the batches in flight may take to commit at shutdown"),
			dur("stats-interval", "STATS_INTERVAL", def.StatsInterval, "how often the backlog and dead-letter gauges are refreshed"),
			&ucli.StringFlag{Name: "log-key", EnvVars: []string{"TALLY_PROJECTOR_LOG_KEY"},
				Usage: "signer key `FILE` (tally log key generate): sign a checkpoint of each poll's log when it changed (empty: none)"},
			dur("checkpoint-interval", "CHECKPOINT_INTERVAL", def.CheckpointInterval, "how often, with --log-key, the changed logs are signed"),
			&ucli.StringFlag{Name: "metrics-listen", EnvVars: []string{"TALLY_PROJECTOR_METRICS_LISTEN"},
				Usage: "TCP `ADDR`ess to serve /metrics and /healthz on (empty: none)"},
		),
		Action: runProjector,
	}
}

func runProjector(c *ucli.Context) error {
	log, err := logger(c)
	if err != nil {
		return err
	}
	cfg := projector.Config{
		Consumer:        c.String("consumer"),
		BatchSize:       c.Int("batch-size"),
		BatchWait:       c.Duration("batch-wait"),
		Workers:         c.Int("workers"),
		MinIdle:         c.Duration("min-idle"),
		ClaimInterval:   c.Duration("claim-interval"),
		MaxDeliveries:   c.Int("max-deliveries"),
		MaxAttempts:     c.Int("max-attempts"),
		BackoffMin:      c.Duration("backoff-min"),
		BackoffMax:      c.Duration("backoff-max"),
		ApplyTimeout:    c.Duration("apply-timeout"),
		BreakerFailures: c.Int("breaker-failures"),
		BreakerOpenFor:  c.Duration("breaker-open-for"),
		ShutdownGrace:   c.Duration("shutdown-grace"),
		StatsInterval:   c.Duration("stats-interval"),

		CheckpointInterval: c.Duration("checkpoint-interval"),
	}
	if cfg.Workers < 1 || cfg.Workers > projector.MaxWorkers {
		// Checked here too, before connecting: 0 would silently mean the default.
		return fmt.Errorf("--workers must be between 1 and %d, got %d", projector.MaxWorkers, cfg.Workers)
	}
	if cfg.LogSigner, err = logSigner(c.String("log-key")); err != nil {
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
		return err
	}
	if conns := cs.pool.Config().MaxConns; int(conns) < cfg.Workers {
		log.LogAttrs(c.Context, slog.LevelWarn, "fewer PostgreSQL connections than workers: the extra workers wait for a connection; add pool_max_conns to --database-url",
			slog.String("component", "projector"), slog.Int("workers", cfg.Workers), slog.Int("pool_max_conns", int(conns)))
	}
	if addr := c.String("metrics-listen"); addr != "" {
		stop, err := serveMetrics(c.Context, addr, reg, log)
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

// serveMetrics serves /metrics and /healthz on addr until stop is called.
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
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
