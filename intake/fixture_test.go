package intake_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
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
	// The Redis-down test makes go-redis log every failed dial.
	redis.SetLogger(quietRedis{})
	os.Exit(testenv.Main(m))
}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// This file holds the fixture of the HTTP tests: setup serves an intake on
// a fresh database and Redis prefix, and the helpers make the principals
// and polls a test needs; fixture_http_test.go sends requests and reads
// answers and metrics.

// bundle is what one test needs: a served intake on a fresh database and a
// unique Redis prefix, a principal and an open poll "p1" with choices a, b.
type bundle struct {
	db     testenv.DB    // zero when the test gave setupStore its store
	store  *ledger.Store // intake's too, but under setupAs
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

type option func(*intake.Config)

func setup(t testing.TB, opts ...option) *bundle {
	t.Helper()
	db := testenv.Postgres(t)
	rdb, prefix := testenv.Redis(t)
	return setupOn(t, db, rdb, prefix, opts...)
}

func setupOn(t testing.TB, db testenv.DB, rdb redis.UniversalClient, prefix string, opts ...option) *bundle {
	t.Helper()
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b := setupStore(t, store, rdb, prefix, testLogger(), opts...)
	b.db = db
	return b
}

// setupStore is setupOn with a store and a logger of the test's own.
func setupStore(t testing.TB, store *ledger.Store, rdb redis.UniversalClient, prefix string, log *slog.Logger, opts ...option) *bundle {
	t.Helper()
	return setupStores(t, store, store, rdb, prefix, log, opts...)
}

// setupAs is setupOn with intake on a pool of its own, on db by url:
// logged in as testenv.DaemonLogin or AdminLogin, as a deployed intake
// is, or with a pool of its own size. The fixture's own writes
// (principals, poll p1) keep db's pool and owner.
func setupAs(t testing.TB, db testenv.DB, rdb redis.UniversalClient, prefix, url string, opts ...option) *bundle {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	intakeStore, err := ledger.New(pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b := setupStores(t, store, intakeStore, rdb, prefix, testLogger(), opts...)
	b.db = db
	return b
}

// setupStores serves an intake on intakeStore, while the bundle's store,
// which the fixture writes with, is store.
func setupStores(t testing.TB, store, intakeStore *ledger.Store, rdb redis.UniversalClient, prefix string, log *slog.Logger, opts ...option) *bundle {
	t.Helper()
	keys, err := stream.NewKeys(prefix, 1)
	if err != nil {
		t.Fatal(err)
	}
	key, err := credential.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	keySet, err := credential.NewKeySet(key)
	if err != nil {
		t.Fatal(err)
	}
	cfg := intake.Config{Rate: 1000, Burst: 1000, Credentials: credential.NewVerifier(keySet), CredentialKeyIDs: []string{key.ID}, TokenKey: &key}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.TokenKey != nil {
		key = *cfg.TokenKey // an option's key (withKeyOf) signs the fixture's tokens too
	}
	srv, err := intake.New(cfg, intakeStore, rdb, keys, log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// With AdminListen set, the admin listener is one of the test's own.
	var admin net.Listener
	if cfg.AdminListen != "" {
		if admin, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ServeAdmin(ctx, ln, admin) }()
	tr := &http.Transport{MaxIdleConnsPerHost: 32}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		cancel()
		if err := testenv.Receive(t, done, 15*time.Second, "Serve to return once its context ended"); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	b := &bundle{store: store, rdb: rdb, keys: keys, url: "http://" + ln.Addr().String(),
		client: &http.Client{Transport: tr, Timeout: 10 * time.Second}, cfg: cfg, m: srv.Metrics(), srv: srv, key: key}
	if admin != nil {
		b.adminURL = "http://" + admin.Addr().String()
	}
	b.who, b.token = b.principal(t, "voter")
	// p1 exists already when this is the second intake on the database.
	if _, err := store.EnsurePoll(context.Background(), ledger.Poll{ID: "p1", Title: "Lunch", Choices: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	b.waitCatalog(t, "p1")
	return b
}

// withKeyOf has intake take and issue the credentials of a's key, as the
// intakes of one deployment share their --credential-key: each takes the
// other's tokens.
func withKeyOf(a *bundle) option {
	return func(c *intake.Config) {
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
	deadline := time.Now().Add(10 * time.Second)
	for !b.srv.CatalogHolds(id) {
		if time.Now().After(deadline) {
			t.Fatalf("intake's catalog did not hold poll %s 10s after its creation", id)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
