// Package cli is the tally command: it reads flags and TALLY_* environment
// variables, builds the logger and connections, and runs the daemons and
// admin commands of packages intake, projector and ledger. It is the only
// package that reads the environment.
//
// Exit codes: 0 success, 1 a check failed (rebuild found a difference), 2
// an error (bad flags, unreachable server). Run never calls os.Exit.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	ucli "github.com/urfave/cli/v2"

	"tally/ledger"
	"tally/stream"
)

// Exit codes.
const (
	ExitOK    = 0
	ExitCheck = 1 // a check failed: rebuild found differences, loadtest broke an invariant
	ExitError = 2
)

// exitError carries an exit code through urfave/cli.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// checkFailed makes a command exit 1 with err's message.
func checkFailed(err error) error { return &exitError{code: ExitCheck, err: err} }

// Run runs the tally command with args (args[0] is the program name) and
// returns the exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	app := newApp(stdin, stdout, stderr)
	err := app.RunContext(ctx, interspersed(app, args))
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && ee.code != ExitCheck {
			fmt.Fprintln(stderr, "tally:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "tally:", err)
	return ExitError
}

// Flags every command shares. The values here are templates: commonFlags
// gives each command its own copies, since urfave/cli writes into a flag
// when it parses one and Run may be called concurrently (tests do).
var (
	flagDatabaseURL = ucli.StringFlag{
		Name: "database-url", EnvVars: []string{"TALLY_DATABASE_URL"},
		Value: "postgres://postgres@127.0.0.1:5432/tally?sslmode=disable",
		Usage: "PostgreSQL `URL` of the ledger",
	}
	flagRedisURL = ucli.StringFlag{
		Name: "redis-url", EnvVars: []string{"TALLY_REDIS_URL"},
		Value: "redis://127.0.0.1:6379/0",
		Usage: "Redis `URL` of the stream",
	}
	flagLogFormat = ucli.StringFlag{
		Name: "log-format", EnvVars: []string{"TALLY_LOG_FORMAT"}, Value: "auto",
		Usage: "log format: text, json, or auto (text on a terminal, json otherwise)",
	}
	flagLogLevel = ucli.StringFlag{
		Name: "log-level", EnvVars: []string{"TALLY_LOG_LEVEL"}, Value: "info",
		Usage: "log level: debug, info, warn or error",
	}
	flagStreamPrefix = ucli.StringFlag{
		Name: "stream-prefix", EnvVars: []string{"TALLY_STREAM_PREFIX"}, Value: stream.DefaultPrefix,
		Usage: "prefix of every Redis key tally writes; intake and projector must agree",
	}
	flagShards = ucli.IntFlag{
		Name: "shards", EnvVars: []string{"TALLY_SHARDS"}, Value: 1,
		Usage: "number of stream shards; intake and projector must agree",
	}
)

func newApp(stdin io.Reader, stdout, stderr io.Writer) *ucli.App {
	return &ucli.App{
		Name:  "tally",
		Usage: "an event-sourced ledger for low-risk polls",
		Description: "tally takes votes through an HTTP intake, queues them durably in a Redis stream, " +
			"and applies them in batches to an append-only PostgreSQL ledger with a projection of the tallies " +
			"that tally rebuild can verify at any time.\n\n" +
			"Not for governmental elections or secret ballots: a principal is an authenticated opaque identity, " +
			"not a verified person.",
		Reader:    stdin,
		Writer:    stdout,
		ErrWriter: stderr,
		Commands: []*ucli.Command{
			migrateCommand(),
			intakeCommand(),
			projectorCommand(),
			rebuildCommand(),
			exportCommand(),
			importCommand(),
			pollCommand(),
			principalCommand(),
			deadletterCommand(),
			statusCommand(),
			loadtestCommand(),
		},
		ExitErrHandler:  func(*ucli.Context, error) {}, // Run reports errors
		HideHelpCommand: true,
	}
}

// commonFlags are the flags every command takes, after its own.
func commonFlags(own ...ucli.Flag) []ucli.Flag {
	db, rd, sp, sh, lf, ll := flagDatabaseURL, flagRedisURL, flagStreamPrefix, flagShards, flagLogFormat, flagLogLevel
	return append(own, &db, &rd, &sp, &sh, &lf, &ll)
}

// redactURL hides the password of a connection URL for messages.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// logger builds the slog logger from --log-format and --log-level.
func logger(c *ucli.Context) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String(flagLogLevel.Name))); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", c.String(flagLogLevel.Name))
	}
	opts := &slog.HandlerOptions{Level: level}
	w := c.App.ErrWriter
	switch f := c.String(flagLogFormat.Name); f {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "auto":
		if isTerminal(w) {
			return slog.New(slog.NewTextHandler(w, opts)), nil
		}
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format %q: use text, json or auto", f)
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// openPool connects to PostgreSQL and checks it answers.
func openPool(c *ucli.Context) (*pgxpool.Pool, error) {
	return openPoolWaiting(c, 0, nil)
}

// openPoolWaiting is openPool that keeps trying for up to wait while the
// server does not answer (a daemon started while PostgreSQL restarts).
func openPoolWaiting(c *ucli.Context, wait time.Duration, log *slog.Logger) (*pgxpool.Pool, error) {
	dbURL := c.String(flagDatabaseURL.Name)
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, fmt.Errorf("--database-url: %w", err)
	}
	// A command with --workers (projector, import) holds a connection per
	// worker; pgx's default pool (4, or the number of CPUs) would make the
	// extra workers wait. An explicit pool_max_conns wins.
	if w := int32(c.Int("workers")); w+1 > cfg.MaxConns && !strings.Contains(dbURL, "pool_max_conns") {
		cfg.MaxConns = w + 1
	}
	pool, err := pgxpool.NewWithConfig(c.Context, cfg)
	if err != nil {
		return nil, fmt.Errorf("--database-url: %w", err)
	}
	if err := waitFor(c.Context, "PostgreSQL", wait, log, pool.Ping); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach PostgreSQL at %s: %w (is it running? set --database-url or TALLY_DATABASE_URL)", redactURL(dbURL), err)
	}
	return pool, nil
}

// waitFor calls ping, each try bounded to 10 s, until it succeeds or wait
// has passed (one try when wait is 0), logging each failure to log.
func waitFor(ctx context.Context, what string, wait time.Duration, log *slog.Logger, ping func(context.Context) error) error {
	deadline := time.Now().Add(wait)
	backoff := 500 * time.Millisecond
	for {
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := ping(tctx)
		cancel()
		left := time.Until(deadline)
		if err == nil || left <= 0 || ctx.Err() != nil {
			return err
		}
		pause := min(backoff, left)
		if log != nil {
			log.Warn("waiting for "+what, "error", err.Error(), "retry_in", pause.String(),
				"gives_up_in", left.Round(time.Second).String())
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// openStore connects to PostgreSQL and returns the ledger on it.
func openStore(c *ucli.Context, cfg ledger.Config) (*ledger.Store, error) {
	pool, err := openPool(c)
	if err != nil {
		return nil, err
	}
	store, err := ledger.New(pool, cfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return store, nil
}

// openRedis connects to Redis and checks it answers.
func openRedis(c *ucli.Context) (*redis.Client, error) {
	return openRedisWaiting(c, 0, nil)
}

// openRedisWaiting is openRedis that keeps trying for up to wait while the
// server does not answer.
func openRedisWaiting(c *ucli.Context, wait time.Duration, log *slog.Logger) (*redis.Client, error) {
	redisURL := c.String(flagRedisURL.Name)
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, fmt.Errorf("--redis-url: %w", err)
	}
	// A context deadline bounds every command, so a hung Redis costs a
	// caller at most its deadline.
	opt.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opt)
	ping := func(ctx context.Context) error { return rdb.Ping(ctx).Err() }
	if err := waitFor(c.Context, "Redis", wait, log, ping); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("cannot reach Redis at %s: %w (is it running? set --redis-url or TALLY_REDIS_URL)", redactURL(redisURL), err)
	}
	return rdb, nil
}

// streamKeys returns the Redis key names from --stream-prefix and --shards.
func streamKeys(c *ucli.Context) (stream.Keys, error) {
	return stream.NewKeys(c.String(flagStreamPrefix.Name), c.Int(flagShards.Name))
}

// conns are what a daemon or the load test needs: the ledger, the Redis
// client and the stream key names.
type conns struct {
	store *ledger.Store
	rdb   *redis.Client
	keys  stream.Keys
}

// flagStartupWait is how long a daemon waits at start for PostgreSQL and
// Redis to answer (a template; see commonFlags).
var flagStartupWait = ucli.DurationFlag{
	Name: "startup-wait", EnvVars: []string{"TALLY_STARTUP_WAIT"}, Value: 2 * time.Minute,
	Usage: "how long to keep trying PostgreSQL and Redis at start before giving up (exit 2)",
}

// startupWaitFlag is --startup-wait, a new one for each command.
func startupWaitFlag() *ucli.DurationFlag {
	f := flagStartupWait
	return &f
}

// openConns connects to PostgreSQL and Redis, each tried for up to wait
// (a daemon's --startup-wait; 0 for one try); close releases both.
func openConns(c *ucli.Context, cfg ledger.Config, wait time.Duration) (*conns, error) {
	keys, err := streamKeys(c)
	if err != nil {
		return nil, err
	}
	pool, err := openPoolWaiting(c, wait, cfg.Logger)
	if err != nil {
		return nil, err
	}
	store, err := ledger.New(pool, cfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	rdb, err := openRedisWaiting(c, wait, cfg.Logger)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &conns{store: store, rdb: rdb, keys: keys}, nil
}

func (cs *conns) close() {
	cs.rdb.Close()
	cs.store.Pool().Close()
}

// newRegistry is a Prometheus registry with the Go runtime and process
// collectors, for a daemon's /metrics.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
