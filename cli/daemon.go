package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/redis/go-redis/v9"
)

// daemonGCPercent is the garbage collector's target of tally intake and
// tally projector. Both keep a few MB live and allocate a few KB per vote,
// so at the runtime's default of 100 they collect many times a second under
// load and the projector spends about a third of its CPU collecting; at 400
// their peak RSS stays well under 100 MB (BENCHMARKS.md has the figures).
const daemonGCPercent = 400

// setupDaemon makes the process-wide settings of a daemon (tally intake,
// tally projector): the garbage collector's target, unless the operator set
// GOGC (the operator's setting wins), and go-redis' own log lines through
// the daemon's logger. Only the commands that run a daemon call it.
func setupDaemon(log *slog.Logger) {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(daemonGCPercent)
	}
	redis.SetLogger(redisLog{log.With(slog.String("component", "redis"))})
}

// redisLog carries go-redis' own log lines (a failed dial, a broken
// connection in its pool) to the daemon's logger, so that they take its
// format and level: with --log-format json, every line stays JSON.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, args ...any) {
	if l.log.Enabled(ctx, slog.LevelWarn) {
		l.log.LogAttrs(ctx, slog.LevelWarn, fmt.Sprintf(format, args...))
	}
}
