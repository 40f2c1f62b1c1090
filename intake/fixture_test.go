package intake_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"tally/credential"
	"tally/intake"
	"tally/internal/testenv"
	"tally/ledger"
	"tally/stream"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m))
}

// This file holds the fixture of the HTTP tests: setup serves an intake on
// a fresh database and Redis prefix, and the helpers make the principals
// and polls a test needs; fixture_http_test.go sends requests and reads
// answers and metrics.

// bundle is what one test needs: a served intake on a fresh database and a
// unique Redis prefix, a principal and an open poll "p1" with choices a, b.
type bundle struct {
	db     testenv.DB    // zero when the test gave withStore its store
	store  *ledger.Store // intake's too, but under withIntakeURL
	rdb    redis.UniversalClient
	keys   stream.Keys
	url    string
	client *http.Client
	token  string
	who    ledger.Principal
	cfg    intake.Config
	m      intake.Metrics
	srv    *intake.Server
	key    credential.Key // signs the tokens of signed()
	// adminURL is the admin listener's, when the test set
	// Config.AdminListen.
	adminURL string
	// handlerOnly: srv is not served, so nothing reloads its catalog but
	// the fixture (waitCatalog).
	handlerOnly bool
}

// config is what setup serves an intake from: intake's Config, which a
// test's options change, and where the intake runs. A field left zero is
// the fixture's own: a fresh database, a Redis prefix of the test's own,
// testLogger.
type config struct {
	intake.Config
	// db holds the fixture's writes (principals, poll p1) and, unless url
	// says otherwise, intake's.
	db testenv.DB
	// rdb is intake's Redis, its keys under prefix.
	rdb    redis.UniversalClient
	prefix string
	// url, when set, is intake's own way into db: a pool of its own,
	// logged in as testenv.DaemonLogin or AdminLogin as a deployed intake
	// is, or with a pool size of its own.
	url string
	// store, when set, is the ledger of both intake and the fixture's
	// writes, and no database is made: the bundle's db stays zero.
	store *ledger.Store
	log   *slog.Logger
	// now, when set, is the clock of intake's results cache.
	now func() time.Time
}

// option changes the config setup serves an intake from.
type option func(*config)

// withDB has the fixture and intake on db rather than on a fresh database.
func withDB(db testenv.DB) option { return func(c *config) { c.db = db } }

// withRedis has intake on rdb with its keys under prefix.
func withRedis(rdb redis.UniversalClient, prefix string) option {
	return func(c *config) { c.rdb, c.prefix = rdb, prefix }
}

// withIntakeURL has intake on a pool of its own, on the database by url.
func withIntakeURL(url string) option { return func(c *config) { c.url = url } }

// withStore has intake and the fixture on store, and makes no database.
func withStore(store *ledger.Store) option { return func(c *config) { c.store = store } }

// withLogger gives intake log rather than testLogger.
func withLogger(log *slog.Logger) option { return func(c *config) { c.log = log } }

// withClock has intake's results cache tell the figures' age by clk, so
// the test moves them past Config.ReadCacheTTL with clk.advance.
func withClock(clk *clock) option { return func(c *config) { c.now = clk.now } }

// clock is time.Now moved on by advance.
type clock struct{ ahead atomic.Int64 }

func (c *clock) now() time.Time { return time.Now().Add(time.Duration(c.ahead.Load())) }

func (c *clock) advance(d time.Duration) { c.ahead.Add(int64(d)) }

// setup serves an intake as opts say: on a fresh database and Redis
// prefix unless they say otherwise. Its principal's token and poll p1 are
// ready when it returns.
func setup(t testing.TB, opts ...option) *bundle {
	t.Helper()
	key, err := credential.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	keySet, err := credential.NewKeySet(key)
	if err != nil {
		t.Fatal(err)
	}
	c := config{Config: intake.Config{Rate: 1000, Burst: 1000, Credentials: credential.NewVerifier(keySet), CredentialKeyIDs: []string{key.ID}, TokenKey: &key}}
	for _, o := range opts {
		o(&c)
	}
	if c.TokenKey != nil {
		key = *c.TokenKey // an option's key (withKeyOf) signs the fixture's tokens too
	}
	store, intakeStore := c.stores(t)
	keys, err := stream.NewKeys(c.prefix, 1)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := intake.New(c.Config, intakeStore, c.rdb, keys, c.log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if c.now != nil {
		intake.SetResultsClock(srv, c.now)
	}
	b := &bundle{db: c.db, store: store, rdb: c.rdb, keys: keys, cfg: c.Config, m: srv.Metrics(), srv: srv, key: key}
	b.serve(t)
	b.who, b.token = b.principal(t, "voter")
	// p1 exists already when this is the second intake on the database.
	if _, err := store.EnsurePoll(context.Background(), ledger.Poll{ID: "p1", Title: "Lunch", Choices: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	b.waitCatalog(t, "p1")
	return b
}

// stores fills in the fields the options left zero, in the order the
// fixture always made them (database, then Redis), and returns the store
// the fixture writes with and intake's.
func (c *config) stores(t testing.TB) (store, intakeStore *ledger.Store) {
	t.Helper()
	if c.store == nil && c.db.Pool == nil {
		c.db = testenv.Postgres(t)
	}
	if c.rdb == nil {
		c.rdb, c.prefix = testenv.Redis(t)
	}
	if c.log == nil {
		c.log = testLogger()
	}
	if c.store != nil {
		return c.store, c.store
	}
	store = newStore(t, c.db.Pool)
	if c.url == "" {
		return store, store
	}
	pool, err := pgxpool.New(context.Background(), c.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return store, newStore(t, pool)
}

func newStore(t testing.TB, pool *pgxpool.Pool) *ledger.Store {
	t.Helper()
	store, err := ledger.New(pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// serve serves b.srv on listeners of the test's own (an admin one too
// when b.cfg sets AdminListen) until the test ends, and fills in b's
// URLs and client.
func (b *bundle) serve(t testing.TB) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var admin net.Listener
	if b.cfg.AdminListen != "" {
		if admin, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.srv.ServeAdmin(ctx, ln, admin) }()
	tr := &http.Transport{MaxIdleConnsPerHost: 32}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		cancel()
		if err := testenv.Receive(t, done, 15*time.Second, "Serve to return once its context ended"); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	b.url = "http://" + ln.Addr().String()
	b.client = &http.Client{Transport: tr, Timeout: 10 * time.Second}
	if admin != nil {
		b.adminURL = "http://" + admin.Addr().String()
	}
}

// withKeyOf has intake take and issue the credentials of a's key, as the
// intakes of one deployment share their --credential-key: each takes the
// other's tokens.
func withKeyOf(a *bundle) option {
	return func(c *config) {
		keySet, err := credential.NewKeySet(a.key)
		if err != nil {
			panic(err) // one key: NewKeySet refuses only an id given twice
		}
		c.Credentials, c.CredentialKeyIDs, c.TokenKey = credential.NewVerifier(keySet), []string{a.key.ID}, &a.key
	}
}

func testLogger() *slog.Logger {
	if os.Getenv("TALLY_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// principal adds a voter named name and issues it a token signed with
// the bundle's key that never expires.
func (b *bundle) principal(t testing.TB, name string) (ledger.Principal, string) {
	t.Helper()
	return b.signed(t, name, time.Time{})
}

// signed adds a principal named name and issues it a token signed with
// the bundle's key, expiring at expires (zero: never).
func (b *bundle) signed(t testing.TB, name string, expires time.Time) (ledger.Principal, string) {
	t.Helper()
	ps, err := b.store.AddPrincipals(context.Background(), []string{name}, "")
	if err != nil {
		t.Fatal(err)
	}
	token, err := b.key.Issue(ps[0].ID, ps[0].CreatedAt, expires)
	if err != nil {
		t.Fatal(err)
	}
	return ps[0], token
}

// admin adds a principal of role admin named name and issues it a token
// signed with the bundle's key.
func (b *bundle) admin(t testing.TB, name string) (ledger.Principal, string) {
	t.Helper()
	ps, err := b.store.AddPrincipals(context.Background(), []string{name}, ledger.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	token, err := b.key.IssueRole(ps[0].ID, credential.RoleAdmin, ps[0].CreatedAt, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return ps[0], token
}

// adminDo sends an admin request with a JSON body (none when body is
// "").
func (b *bundle) adminDo(t *testing.T, method, path, token, body string) reply {
	t.Helper()
	ct := ""
	if body != "" {
		ct = "application/json"
	}
	return b.do(t, method, path, token, ct, []byte(body))
}

// poll creates p and waits until the served intake's catalog holds it: a
// poll is known to intake once it heard of its creation.
func (b *bundle) poll(t testing.TB, p ledger.Poll) {
	t.Helper()
	if err := b.store.CreatePoll(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	b.waitCatalog(t, p.ID)
}

// waitRevoked waits until the served intake's revocations in memory
// refuse principal id: a revocation made in the ledger reaches intake with
// the catalog's change log.
func (b *bundle) waitRevoked(t testing.TB, id string) {
	t.Helper()
	if b.handlerOnly {
		if err := b.srv.Reload(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 10*time.Second, "intake to hold the revocation of "+id, func() bool { return b.srv.Revoked(id) })
}

// waitCatalog waits until the served intake's catalog holds poll id.
func (b *bundle) waitCatalog(t testing.TB, id string) {
	t.Helper()
	if b.handlerOnly {
		if err := b.srv.Reload(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 10*time.Second, "intake's catalog to hold poll "+id, func() bool { return b.srv.CatalogHolds(id) })
}
