package chaos_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/redis/go-redis/v9"

	"tally/credential"
	"tally/internal/chaos"
	"tally/internal/testenv"
	"tally/ledger"
	"tally/stream"
)

// shards is the number of stream shards every daemon of a scenario uses.
const shards = 2

// cluster is the world of one scenario: Redis, a database, intakes and
// projectors.
type cluster struct {
	t     *testing.T
	dir   string
	redis *testenv.RedisServer // nil with clusterOptions.redis
	pg    *testenv.PGServer    // nil: a database on the shared PostgreSQL
	// standby: pg's synchronous streaming standby, or nil. With one, every
	// URL names both servers and connects to the one that takes writes.
	standby *testenv.PGServer
	dbURL   string
	store   *ledger.Store
	// key signs the principals' tokens; keyFile holds it, every intake's
	// --credential-key.
	key     credential.Key
	keyFile string
	pool    *pgxpool.Pool         // the store's: the owner's connections
	rdb     redis.UniversalClient // straight to Redis, for the queue's status
	keys    stream.Keys
	prefix  string

	// The Redis deployment the daemons use (--redis-mode, --redis-url),
	// and the URLs they use; a scenario may put a proxy on them.
	redisMode      string
	redisURL       string
	intakeRedisURL string
	projectorDBURL string

	intakes    []*chaos.Process
	projectors []*chaos.Process

	// lossExpected: votes answered 202 may be lost (clusterOptions.redis's
	// lossExpected); the run records how many instead of failing.
	lossExpected bool
}

type clusterOptions struct {
	intakes, projectors int
	privatePostgres     bool
	standby             bool     // privatePostgres with a synchronous standby
	maxBacklog          int      // intake's --max-backlog; 0: its default
	projectorArgs       []string // flags added to every projector's
	intakeArgs          []string // flags added to every intake's
	// proxies: when set, called with the Redis and database addresses
	// before the daemons start; returns the addresses intake uses for
	// Redis and projector for PostgreSQL.
	proxies func(redisAddr, pgAddr string) (intakeRedis, projectorPG string)
	// redis: when set, the daemons use this deployment instead of a
	// private redis-server, with its stream prefix and shards.
	redis *redisDeployment
}

// redisDeployment is a Redis the scenario started itself (a cluster, a
// Sentinel set): how the daemons name it, the test's own client of it,
// and the stream keys to use on it.
type redisDeployment struct {
	mode, url string
	rdb       redis.UniversalClient
	keys      stream.Keys
	// lossExpected: a failover of this deployment may lose votes answered
	// 202 (asynchronous replication without intake's WAIT).
	lossExpected bool
}

func newCluster(t *testing.T, opt clusterOptions) *cluster {
	t.Helper()
	c := &cluster{t: t, dir: t.TempDir()}
	c.key, c.keyFile = credentialKey(t, c.dir)
	if opt.redis == nil {
		c.redis = testenv.StartRedis(t)
	}
	var db testenv.DB
	var pgAddr string
	if opt.privatePostgres {
		c.pg = testenv.StartPostgres(t)
		db = c.pg.Migrated("tally")
		pgAddr = c.pg.Addr()
	} else {
		db = testenv.Postgres(t)
		cfg := db.Pool.Config().ConnConfig
		pgAddr = net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	}
	if opt.standby {
		c.standby = testenv.StartStandby(t, c.pg, true)
		db.Pool = c.failoverPool()
	}
	c.dbURL = testenv.DaemonLogin(t, db)
	if opt.standby {
		u, err := url.Parse(c.dbURL)
		if err != nil {
			t.Fatal(err)
		}
		c.dbURL = testenv.MultiHostURL(u.User.Username(), "tally", c.pg, c.standby)
	}
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c.store, c.pool = store, db.Pool
	if d := opt.redis; d != nil {
		c.redisMode, c.redisURL, c.rdb, c.keys, c.prefix = d.mode, d.url, d.rdb, d.keys, d.keys.Prefix()
		c.lossExpected = d.lossExpected
	} else {
		c.redisMode, c.redisURL = "single", c.redis.URL()
		c.rdb = redis.NewClient(&redis.Options{Addr: c.redis.Addr})
		t.Cleanup(func() { c.rdb.Close() })
		c.prefix = testenv.RandomName("chaos")
		if c.keys, err = stream.NewKeys(c.prefix, shards); err != nil {
			t.Fatal(err)
		}
	}

	c.intakeRedisURL, c.projectorDBURL = c.redisURL, c.dbURL
	if opt.proxies != nil {
		redisAddr, projPG := opt.proxies(c.redis.Addr, pgAddr)
		c.intakeRedisURL = "redis://" + redisAddr + "/0"
		c.projectorDBURL = replaceHost(t, c.dbURL, projPG)
	}

	for i := range opt.projectors {
		p := c.newProjector(i + 1)
		p.Args = append(p.Args, opt.projectorArgs...)
		c.projectors = append(c.projectors, p)
	}
	for i := range opt.intakes {
		p := c.newIntake(i + 1)
		if opt.maxBacklog > 0 {
			p.Args = append(p.Args, "--max-backlog", strconv.Itoa(opt.maxBacklog))
		}
		p.Args = append(p.Args, opt.intakeArgs...)
		c.intakes = append(c.intakes, p)
	}
	ctx := context.Background()
	for _, p := range append(append([]*chaos.Process(nil), c.projectors...), c.intakes...) {
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		// Kill rather than stop: nothing a daemon does at exit may count
		// towards a verdict, and the verdict is already in.
		for _, p := range append(append([]*chaos.Process(nil), c.intakes...), c.projectors...) {
			p.Kill()
		}
		if t.Failed() {
			for _, p := range append(append([]*chaos.Process(nil), c.intakes...), c.projectors...) {
				t.Logf("--- last lines of %s's log (%s):\n%s", p.Name, p.LogPath, p.LogTail(60))
			}
			if c.pg != nil {
				t.Logf("--- PostgreSQL log:\n%s", tail(c.pg.Log(), 40))
			}
			if c.standby != nil {
				t.Logf("--- the standby's PostgreSQL log:\n%s", tail(c.standby.Log(), 40))
			}
		}
	})
	return c
}

// failoverPool is the test's own pool (the owner's) on the primary and
// the standby, whichever takes writes.
func (c *cluster) failoverPool() *pgxpool.Pool {
	c.t.Helper()
	pool, err := pgxpool.New(context.Background(), testenv.MultiHostURL("postgres", "tally", c.pg, c.standby))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(pool.Close)
	return pool
}

func replaceHost(t *testing.T, dbURL, addr string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	return u.String()
}

// common are the flags every daemon of the cluster takes.
func (c *cluster) common(dbURL, redisURL string) []string {
	return []string{
		"--database-url", dbURL, "--redis-url", redisURL, "--redis-mode", c.redisMode,
		"--stream-prefix", c.prefix, "--shards", strconv.Itoa(c.keys.Shards()),
		"--log-format", "text", "--log-level", "info",
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := testenv.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

func (c *cluster) newIntake(n int) *chaos.Process {
	addr := freeAddr(c.t)
	name := fmt.Sprintf("intake-%d", n)
	args := append([]string{"intake",
		"--listen", addr,
		"--rate", "100000", "--burst", "100000",
		"--breaker-open-for", "1s", "--backlog-retry-after", "1s",
		"--shutdown-timeout", "2s", "--credential-key", c.keyFile,
	}, c.common(c.dbURL, c.intakeRedisURL)...)
	return &chaos.Process{
		Name: name, Path: tallyBin, Args: args,
		LogPath: filepath.Join(c.dir, name+".log"),
		Health:  "http://" + addr + "/healthz",
	}
}

// credentialKey is a fresh credential key and the file in dir that holds
// it.
func credentialKey(t *testing.T, dir string) (credential.Key, string) {
	t.Helper()
	key, err := credential.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	data, err := key.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "credential.key")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return key, file
}

// signed adds a principal named name and returns a token for it signed
// with the cluster's key.
func (c *cluster) signed(ctx context.Context, name string) (ledger.Principal, string, error) {
	ps, err := c.store.AddPrincipals(ctx, []string{name}, "")
	if err != nil {
		return ledger.Principal{}, "", err
	}
	token, err := c.key.Issue(ps[0].ID, ps[0].CreatedAt, time.Time{})
	return ps[0], token, err
}

func (c *cluster) newProjector(n int) *chaos.Process {
	addr := freeAddr(c.t)
	name := fmt.Sprintf("projector-%d", n)
	args := append([]string{"projector",
		"--consumer", name,
		"--metrics-listen", addr,
		"--batch-size", "500", "--batch-wait", "20ms",
		"--min-idle", "2s", "--claim-interval", "500ms",
		"--backoff-min", "50ms", "--backoff-max", "1s",
		"--breaker-open-for", "1s", "--stats-interval", "1s",
		"--shutdown-grace", "2s",
	}, c.common(c.projectorDBURL, c.redisURL)...)
	return &chaos.Process{
		Name: name, Path: tallyBin, Args: args,
		LogPath: filepath.Join(c.dir, name+".log"),
		Health:  "http://" + addr + "/healthz",
	}
}

// intakeURLs are the base URLs of the intakes.
func (c *cluster) intakeURLs() []string {
	var urls []string
	for _, p := range c.intakes {
		for i, a := range p.Args {
			if a == "--listen" {
				urls = append(urls, "http://"+p.Args[i+1])
			}
		}
	}
	return urls
}

// checkAlive fails the test for every daemon that exited by itself.
func (c *cluster) checkAlive() {
	c.t.Helper()
	for _, p := range append(append([]*chaos.Process(nil), c.intakes...), c.projectors...) {
		if exited, err := p.Exited(); exited {
			c.t.Errorf("%s exited by itself (%v); log:\n%s", p.Name, err, p.LogTail(40))
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// projectorCounters sums, over the live projectors, the claims and the
// duplicates they counted since their last start, from their /metrics.
func (c *cluster) projectorCounters(ctx context.Context) (claimed, duplicates float64) {
	client := &http.Client{Timeout: 2 * time.Second}
	for _, p := range c.projectors {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(p.Health, "/healthz")+"/metrics", nil)
		if err != nil {
			continue
		}
		resp, err := client.Do(req)
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(body), "\n") {
			name, value, ok := strings.Cut(line, " ")
			if !ok {
				continue
			}
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				continue
			}
			switch {
			case name == "tally_projector_claimed_total":
				claimed += v
			case strings.HasPrefix(name, "tally_projector_events_total{") && strings.Contains(name, `outcome="duplicate"`):
				duplicates += v
			}
		}
	}
	return claimed, duplicates
}
