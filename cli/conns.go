package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-retry"
	ucli "github.com/urfave/cli/v2"

	"tally/ledger"
	"tally/stream"
)

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

// The start-up wait's pace: the first pause, the longest pause, and the
// bound on one try.
const (
	waitFirstPause = 500 * time.Millisecond
	waitMaxPause   = 5 * time.Second
	waitTryTimeout = 10 * time.Second
)

// waitFor calls ping, each try bounded to waitTryTimeout, until it succeeds
// or wait has passed (one try when wait is 0), logging each failure to log.
// It stops as soon as ctx ends. It returns the last error of ping.
func waitFor(ctx context.Context, what string, wait time.Duration, log *slog.Logger, ping func(context.Context) error) error {
	deadline := time.Now().Add(wait)
	var last error
	pauses := retry.WithMaxDuration(wait, retry.WithCappedDuration(waitMaxPause, retry.NewExponential(waitFirstPause)))
	logged := retry.BackoffFunc(func() (time.Duration, bool) {
		pause, stop := pauses.Next()
		if !stop && log != nil {
			log.Warn("waiting for "+what, "error", last.Error(), "retry_in", pause.String(),
				"gives_up_in", time.Until(deadline).Round(time.Second).String())
		}
		return pause, stop
	})
	err := retry.Do(ctx, logged, func(ctx context.Context) error {
		tctx, cancel := context.WithTimeout(ctx, waitTryTimeout)
		defer cancel()
		if last = ping(tctx); last != nil && ctx.Err() == nil {
			return retry.RetryableError(last)
		}
		return last
	})
	if err != nil && last != nil {
		return last // what the server said, rather than "context canceled"
	}
	return err
}

// redactURL hides the password of a connection URL for messages.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
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

// withStore opens the ledger for one command, runs fn with it and closes it.
func withStore(c *ucli.Context, fn func(*ledger.Store) error) error {
	pool, err := openPool(c)
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := ledger.New(pool, ledger.Config{})
	if err != nil {
		return err
	}
	return fn(store)
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

// withRedis opens Redis for one command, runs fn with it and the stream key
// names, and closes it.
func withRedis(c *ucli.Context, fn func(*redis.Client, stream.Keys) error) error {
	keys, err := streamKeys(c)
	if err != nil {
		return err
	}
	rdb, err := openRedis(c)
	if err != nil {
		return err
	}
	defer rdb.Close()
	return fn(rdb, keys)
}

// streamKeys returns the Redis key names from --stream-prefix and --shards.
func streamKeys(c *ucli.Context) (stream.Keys, error) {
	return stream.NewKeys(c.String(flagStreamPrefix.Name), c.Int(flagShards.Name))
}

// conns are what a daemon or the load test needs: the ledger, the Redis
// client and the stream key names.
type conns struct {
	pool  *pgxpool.Pool // the store's, closed by close
	store *ledger.Store
	rdb   *redis.Client
	keys  stream.Keys
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
	return &conns{pool: pool, store: store, rdb: rdb, keys: keys}, nil
}

func (cs *conns) close() {
	cs.rdb.Close()
	cs.pool.Close()
}
