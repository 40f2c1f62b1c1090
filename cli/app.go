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
	dbURL := c.String(flagDatabaseURL.Name)
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, fmt.Errorf("--database-url: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(c.Context, cfg)
	if err != nil {
		return nil, fmt.Errorf("--database-url: %w", err)
	}
	ctx, cancel := context.WithTimeout(c.Context, 10*time.Second)
	defer cancel()
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach PostgreSQL at %s: %w (is it running? set --database-url or TALLY_DATABASE_URL)", redactURL(dbURL), err)
	}
	return pool, nil
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
	redisURL := c.String(flagRedisURL.Name)
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, fmt.Errorf("--redis-url: %w", err)
	}
	// A context deadline bounds every command, so a hung Redis costs a
	// caller at most its deadline.
	opt.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(c.Context, 10*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
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

// openConns connects to PostgreSQL and Redis; close releases both.
func openConns(c *ucli.Context, cfg ledger.Config) (*conns, error) {
	keys, err := streamKeys(c)
	if err != nil {
		return nil, err
	}
	store, err := openStore(c, cfg)
	if err != nil {
		return nil, err
	}
	rdb, err := openRedis(c)
	if err != nil {
		store.Pool().Close()
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
