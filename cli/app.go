package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	ucli "github.com/urfave/cli/v2"

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
		Version:   versionString(),
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
			credentialCommand(),
			deadletterCommand(),
			statusCommand(),
			loadtestCommand(),
			logCommand(),
			auditCommand(),
			adminCommand(),
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

// newRegistry is a Prometheus registry with the Go runtime and process
// collectors, for a daemon's /metrics.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
