package intake_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"tally/credential"
	"tally/intake"
	"tally/internal/apitest"
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
// a fresh database and Redis prefix, and the helpers send requests and read
// answers and metrics.

// bundle is what one test needs: a served intake on a fresh database and a
// unique Redis prefix, a principal and an open poll "p1" with choices a, b.
type bundle struct {
	db     testenv.DB // zero when the test gave setupStore its store
	store  *ledger.Store
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
	cfg := intake.Config{Rate: 1000, Burst: 1000, Credentials: credential.NewVerifier(keySet), TokenKey: &key}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := intake.New(cfg, store, rdb, keys, log, prometheus.NewRegistry())
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
	b.poll(t, ledger.Poll{ID: "p1", Title: "Lunch", Choices: []string{"a", "b"}})
	return b
}

func testLogger() *slog.Logger {
	if os.Getenv("TALLY_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func (b *bundle) principal(t testing.TB, name string) (ledger.Principal, string) {
	t.Helper()
	p, token, err := b.store.AddPrincipal(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return p, token
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

// reply is an HTTP answer with its body decoded.
type reply struct {
	code   int
	header http.Header
	body   map[string]any
	raw    string
	proto  int  // the HTTP major version it came in
	tls    bool // it came over TLS
}

func (r reply) str(key string) string { s, _ := r.body[key].(string); return s }

func (b *bundle) do(t *testing.T, method, path, token, contentType string, body []byte) reply {
	t.Helper()
	req, err := http.NewRequest(method, b.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return b.send(t, req)
}

// contract is intake's OpenAPI document, loaded once for every test.
var contract = sync.OnceValues(func() (*apitest.Contract, error) {
	return apitest.Load(intake.OpenAPIDocument())
})

// checked is client with every exchange checked against intake's OpenAPI
// document: a request the document refuses that intake accepts, or an
// answer the document does not give its route, fails t.
func checked(t testing.TB, client *http.Client) *http.Client {
	t.Helper()
	c, err := contract()
	if err != nil {
		t.Fatal(err)
	}
	checked := *client
	checked.Transport = c.Transport(t, client.Transport)
	return &checked
}

// serve has h answer req without a server, as tests of a handler alone
// do, and checks the exchange against the OpenAPI document.
func serve(t testing.TB, h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			t.Fatal(err)
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	api, err := contract()
	if err != nil {
		t.Fatal(err)
	}
	if err := api.Check(req, body, w.Code, w.Header(), w.Body.Bytes()); err != nil {
		t.Errorf("OpenAPI contract: %v", err)
	}
	return w
}

// send sends req with the bundle's client, checked against the OpenAPI
// document, and reads the whole answer.
func (b *bundle) send(t *testing.T, req *http.Request) reply {
	t.Helper()
	resp, err := checked(t, b.client).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := reply{code: resp.StatusCode, header: resp.Header, raw: string(raw), proto: resp.ProtoMajor, tls: resp.TLS != nil}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

func voteBody(eventID, poll, cand string) []byte {
	return []byte(fmt.Sprintf(`{"event_id":%q,"poll_id":%q,"candidate_id":%q}`, eventID, poll, cand))
}

func (b *bundle) vote(t *testing.T, token, eventID, poll, cand string) reply {
	t.Helper()
	return b.do(t, http.MethodPost, "/v1/votes", token, "application/json", voteBody(eventID, poll, cand))
}

func (b *bundle) xlen(t *testing.T) int64 {
	t.Helper()
	n, err := b.rdb.XLen(context.Background(), b.keys.Stream(0)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// wantProblem checks r is a problem+json answer with status code.
func wantProblem(t *testing.T, r reply, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("status %d, want %d: %s", r.code, code, r.raw)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	if r.str("type") == "" || r.str("title") == "" || r.str("detail") == "" || r.body["status"] != float64(code) {
		t.Fatalf("incomplete problem document: %s", r.raw)
	}
}

// wantProblemType is wantProblem with the problem's type, by its slug
// (the part after "urn:tally:problem:").
func wantProblemType(t *testing.T, r reply, code int, slug string) {
	t.Helper()
	wantProblem(t, r, code)
	if got := r.str("type"); got != "urn:tally:problem:"+slug {
		t.Fatalf("problem type %q, want urn:tally:problem:%s: %s", got, slug, r.raw)
	}
}

// count is the value of a counter, to compare with what the test sent.
func count(c prometheus.Collector) int { return int(testutil.ToFloat64(c)) }

// observations is the number of samples of one child of a histogram.
func observations(t *testing.T, vec *prometheus.HistogramVec, label string) uint64 {
	t.Helper()
	var m dto.Metric
	if err := vec.WithLabelValues(label).(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// eventually fails t unless ok holds within 5s. A request is counted
// after its answer was written, so a client may see the answer first.
func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); {
		if time.Now().After(deadline) {
			t.Fatalf("after 5s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
