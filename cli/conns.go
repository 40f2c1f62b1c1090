package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
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

// allowSuperuserFlag is the daemons' --allow-superuser (see
// checkDaemonRole), a new one for each command.
func allowSuperuserFlag() *ucli.BoolFlag {
	return &ucli.BoolFlag{Name: "allow-superuser", EnvVars: []string{"TALLY_ALLOW_SUPERUSER"},
		Usage: "start even when --database-url logs in as a superuser or as a role that may change or delete the ledger's rows " +
			"(its owner); a daemon should log in as a role granted tally_daemon, which may only append"}
}

// checkDaemonRole refuses to run daemon (intake, projector) as a
// PostgreSQL superuser, or as a role that may UPDATE, DELETE or TRUNCATE
// the ledger (its owner), unless --allow-superuser says so, when it warns
// instead. Such a role could rewrite the past, and switch off the
// triggers that refuse it; a daemon needs only to append.
func checkDaemonRole(c *ucli.Context, store *ledger.Store, log *slog.Logger, daemon string) error {
	role, err := store.Role(c.Context)
	if err != nil {
		return err
	}
	if !role.Privileged() {
		return nil
	}
	what := "a superuser"
	if !role.Superuser {
		what = "a role that may change or delete the ledger's rows (its owner, or one granted UPDATE, DELETE or TRUNCATE on poll_events)"
	}
	if c.Bool("allow-superuser") {
		log.LogAttrs(c.Context, slog.LevelWarn, "running as "+what+" (--allow-superuser): log in as a role granted tally_daemon instead",
			slog.String("component", daemon), slog.String("role", role.Name))
		return nil
	}
	return fmt.Errorf("%s logs in to PostgreSQL as %q, %s, and will not run so: "+
		"make a login granted tally_daemon, which may only append (CREATE ROLE tally_app LOGIN IN ROLE tally_daemon; "+
		"docs/operations.md, \"Running the daemons with least privilege\"), and put it in --database-url; "+
		"or pass --allow-superuser to run anyway", daemon, role.Name, what)
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
		if last = ping(tctx); last != nil && ctx.Err() == nil && !isFinal(last) {
			return retry.RetryableError(last)
		}
		return last
	})
	if err != nil && last != nil {
		return last // what the server said, rather than "context canceled"
	}
	return err
}

// openPool connects to PostgreSQL and checks it answers.
func openPool(c *ucli.Context) (*pgxpool.Pool, error) {
	return openPoolWaiting(c, 0, nil)
}

// openPoolWaiting is openPool that keeps trying for up to wait while the
// server does not answer (a daemon started while PostgreSQL restarts). A
// server that answers no to the login (loginRefused) is not tried again.
func openPoolWaiting(c *ucli.Context, wait time.Duration, log *slog.Logger) (*pgxpool.Pool, error) {
	dbURL := c.String(flagDatabaseURL.Name)
	if err := checkDatabaseScheme(dbURL); err != nil {
		return nil, err
	}
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
	ledger.BufferedReads(&cfg.ConnConfig.Config)
	pool, err := pgxpool.NewWithConfig(c.Context, cfg)
	if err != nil {
		return nil, fmt.Errorf("--database-url: %w", err)
	}
	ping := func(ctx context.Context) error { return loginRefused(pool.Ping(ctx)) }
	if err := waitFor(c.Context, "PostgreSQL", wait, log, ping); err != nil {
		pool.Close()
		return nil, unreachablePostgres(dbURL, err)
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

// Redis deployments (--redis-mode), each in go-redis' own URL form.
const (
	redisSingle   = "single"   // redis.ParseURL: redis://host:6379/0
	redisSentinel = "sentinel" // redis.ParseFailoverURL: redis://sentinel:26379/0?master_name=NAME&addr=sentinel2:26379
	redisCluster  = "cluster"  // redis.ParseClusterURL: redis://node:6379?addr=node2:6379
)

// flagRedisMode says how --redis-url names Redis (a template; see
// redisFlags).
var flagRedisMode = ucli.StringFlag{
	Name: "redis-mode", EnvVars: []string{"TALLY_REDIS_MODE"}, Value: redisSingle,
	Usage: "`MODE` of the Redis deployment --redis-url names: single (redis://host:6379/0), " +
		"sentinel (redis://sentinel:26379/0?master_name=NAME&addr=sentinel2:26379, one addr= per further sentinel) " +
		"or cluster (redis://node:6379?addr=node2:6379, one addr= per further seed node)",
}

// redisFlags are the flags of a command that talks to Redis: commonFlags,
// with --redis-mode right after --redis-url.
func redisFlags(own ...ucli.Flag) []ucli.Flag {
	flags := commonFlags(own...)
	mode := flagRedisMode
	i := slices.IndexFunc(flags, func(f ucli.Flag) bool { return slices.Contains(f.Names(), flagRedisURL.Name) })
	return slices.Insert(flags, i+1, ucli.Flag(&mode))
}

// newRedisClient makes the client of the deployment mode and rawURL
// describe, without connecting. It refuses a URL that does not fit the
// mode, saying what to change. A command is bounded by its context's
// deadline (ContextTimeoutEnabled), so a hung Redis costs a caller at most
// its deadline. It speaks RESP2 unless the URL asks for protocol=3 (see
// resp2).
func newRedisClient(mode, rawURL string) (redis.UniversalClient, error) {
	if err := checkRedisScheme(rawURL); err != nil {
		return nil, err
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("--redis-url: %w", err)
	}
	q := u.Query()
	switch mode {
	case redisSingle:
		if q.Has("master_name") {
			return nil, errors.New("--redis-url names a Sentinel master (master_name=): add --redis-mode sentinel")
		}
		if q.Has("addr") {
			return nil, errors.New("--redis-url lists further nodes (addr=), which a single server has not: " +
				"add --redis-mode cluster for a Redis Cluster, or --redis-mode sentinel with master_name= for Sentinel")
		}
		opt, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("--redis-url: %w (--redis-mode single takes redis://[user:password@]host:6379/db, rediss:// or unix://)", err)
		}
		opt.ContextTimeoutEnabled = true
		opt.Protocol = resp2(opt.Protocol)
		return redis.NewClient(opt), nil
	case redisSentinel:
		if q.Get("master_name") == "" {
			return nil, errors.New("--redis-mode sentinel needs the master's name in --redis-url: " +
				"redis://SENTINEL:26379/0?master_name=NAME&addr=SENTINEL2:26379 (one addr= per further sentinel)")
		}
		opt, err := redis.ParseFailoverURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("--redis-url: %w (--redis-mode sentinel takes redis://[user:password@]SENTINEL:26379/db?master_name=NAME&addr=SENTINEL2:26379)", err)
		}
		opt.ContextTimeoutEnabled = true
		opt.Protocol = resp2(opt.Protocol)
		return redis.NewFailoverClient(opt), nil
	case redisCluster:
		if q.Has("master_name") {
			return nil, errors.New("--redis-url names a Sentinel master (master_name=), which is for --redis-mode sentinel: " +
				"a cluster URL names seed nodes, redis://NODE:6379?addr=NODE2:6379")
		}
		opt, err := redis.ParseClusterURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("--redis-url: %w (--redis-mode cluster takes redis://[user:password@]NODE:6379?addr=NODE2:6379 or rediss://)", err)
		}
		// ParseClusterURL ignores a path.
		if db := strings.Trim(u.Path, "/"); db != "" && db != "0" {
			return nil, fmt.Errorf("--redis-url selects database %s, and a Redis Cluster has only database 0: drop /%s from the URL", db, db)
		}
		opt.ContextTimeoutEnabled = true
		opt.Protocol = resp2(opt.Protocol)
		return redis.NewClusterClient(opt), nil
	default:
		return nil, fmt.Errorf("--redis-mode %q: use single, sentinel or cluster", mode)
	}
}

// resp2 is the RESP version of tally's clients: 2 unless the URL's
// protocol= chose one. go-redis on RESP3 looks for push notifications
// around every reply (BENCHMARKS.md, issue 37), and tally
// subscribes to nothing, tracks no keys and reads no RESP3-only reply.
func resp2(fromURL int) int {
	if fromURL == 0 {
		return 2
	}
	return fromURL
}

// openRedis connects to Redis and checks it answers.
func openRedis(c *ucli.Context) (redis.UniversalClient, error) {
	return openRedisWaiting(c, 0, nil)
}

// openRedisWaiting is openRedis that keeps trying for up to wait while the
// server does not answer. A server that answers but is not of the
// deployment --redis-mode names is refused at once.
func openRedisWaiting(c *ucli.Context, wait time.Duration, log *slog.Logger) (redis.UniversalClient, error) {
	redisURL := c.String(flagRedisURL.Name)
	mode := c.String(flagRedisMode.Name)
	if mode == "" {
		mode = redisSingle // a command without --redis-mode
	}
	rdb, err := newRedisClient(mode, redisURL)
	if err != nil {
		return nil, err
	}
	ping := func(ctx context.Context) error {
		if err := plainNotTLS(ctx, redisURL); err != nil {
			return err
		}
		if err := rdb.Ping(ctx).Err(); err != nil {
			if tlsErr := tlsNotPlain(ctx, redisURL); tlsErr != nil {
				return tlsErr
			}
			return redisAuthRefused(modeMismatch(mode, err))
		}
		return checkNotCluster(ctx, mode, rdb)
	}
	if err := waitFor(c.Context, "Redis", wait, log, ping); err != nil {
		rdb.Close()
		if isFinal(err) {
			return nil, fmt.Errorf("--redis-url %s: %w", redactURL(redisURL), err)
		}
		return nil, fmt.Errorf("cannot reach Redis (--redis-mode %s) at %s: %w (is it running? set --redis-url or TALLY_REDIS_URL, and --redis-mode or TALLY_REDIS_MODE)",
			mode, redactURL(redisURL), err)
	}
	return rdb, nil
}

// checkNotCluster refuses, in single and sentinel modes, a server that is
// a node of a Redis Cluster: it would answer MOVED for most keys. A server
// that does not allow INFO passes.
func checkNotCluster(ctx context.Context, mode string, rdb redis.UniversalClient) error {
	if mode == redisCluster {
		return nil
	}
	info, err := rdb.Info(ctx, "cluster").Result()
	if err == nil && strings.Contains(info, "cluster_enabled:1") {
		return wrongModeError{"it is a node of a Redis Cluster: add --redis-mode cluster " +
			"(and list further nodes as addr= parameters)"}
	}
	return nil
}

// withRedis opens Redis for one command, runs fn with it and the stream key
// names, and closes it.
func withRedis(c *ucli.Context, fn func(redis.UniversalClient, stream.Keys) error) error {
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
	rdb   redis.UniversalClient
	keys  stream.Keys
}

// openConns connects to PostgreSQL and Redis, each tried for up to wait
// (a daemon's --startup-wait; 0 for one try); close releases both.
func openConns(c *ucli.Context, cfg ledger.Config, wait time.Duration) (*conns, error) {
	keys, err := streamKeys(c)
	if err != nil {
		return nil, err
	}
	// Both URLs' forms are checked before either server is waited for.
	if err := checkRedisScheme(c.String(flagRedisURL.Name)); err != nil {
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
