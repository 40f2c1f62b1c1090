package intake_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"tally/credential"
	"tally/intake"
	"tally/internal/testenv"
	"tally/ledger"
	"tally/stream"
)

// This file tests the limits intake keeps in memory: failed
// authentications per client address, and reads per principal.

// queryCounter counts the queries a pool runs whose SQL contains match
// (every query when match is "").
type queryCounter struct {
	match string
	n     atomic.Int64
}

func (c *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, c.match) {
		c.n.Add(1)
	}
	return ctx
}

func (*queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// tracedStore is a Store on db whose pool's queries go through tracer.
func tracedStore(t *testing.T, db testenv.DB, tracer pgx.QueryTracer) *ledger.Store {
	t.Helper()
	pcfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store, err := ledger.New(pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// limited is an intake served for a test of its limits, with its log (at
// debug level) and the key whose tokens it takes, unless the test gave
// Config.Credentials.
type limited struct {
	srv   *intake.Server
	store *ledger.Store
	url   string
	log   *testenv.LogBuffer
	key   credential.Key
}

// limitServer is an intake on a fresh database and Redis prefix, whose
// handler is served on a loopback port until the test ends. It is served
// without Serve, so nothing but the test reloads its catalog.
func limitServer(t *testing.T, cfg intake.Config) *limited {
	t.Helper()
	store, err := ledger.New(testenv.Postgres(t).Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var key credential.Key
	if cfg.Credentials == nil {
		key, cfg.Credentials = credentialKey(t)
	}
	rdb, prefix := testenv.Redis(t)
	keys, _ := stream.NewKeys(prefix, 1)
	logs := &testenv.LogBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := intake.New(cfg, store, rdb, keys, logger, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	t.Cleanup(func() {
		hs.Close()
		if err := testenv.Receive(t, done, 15*time.Second, "Serve to return once the server closed"); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	return &limited{srv: srv, store: store, url: "http://" + ln.Addr().String(), log: logs, key: key}
}

// TestReadLimit reads beyond one principal's budget: both read routes
// share it and get 429 with Retry-After, while its votes and another
// principal's reads are not touched.
func TestReadLimit(t *testing.T) {
	t.Parallel()
	const burst = 3
	ls := limitServer(t, intake.Config{ReadRate: 0.001, ReadBurst: burst})
	store := ls.store
	ctx := context.Background()
	tokens := signPrincipals(t, store, ls.key, 2)
	token, other := tokens[0], tokens[1]
	if err := store.CreatePoll(ctx, ledger.Poll{ID: "p1", Title: "Lunch", Choices: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	b := &bundle{url: ls.url, client: clientFrom(t, "127.0.0.1"), srv: ls.srv, handlerOnly: true}
	b.waitCatalog(t, "p1")
	for range burst {
		wantProblemType(t, b.do(t, http.MethodGet, "/v1/votes/nope", token, "", nil), http.StatusNotFound, "not-found")
	}
	for _, path := range []string{"/v1/votes/nope", "/v1/polls/p1/results"} {
		r := b.do(t, http.MethodGet, path, token, "", nil)
		wantProblemType(t, r, http.StatusTooManyRequests, "rate-limited")
		if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 {
			t.Fatalf("%s: Retry-After %q, want whole seconds of at least 1", path, r.header.Get("Retry-After"))
		}
		if !strings.Contains(r.str("detail"), "reads per second") {
			t.Fatalf("%s: the detail does not say reads are limited: %s", path, r.raw)
		}
	}
	if r := b.vote(t, token, "e1", "p1", "a"); r.code != http.StatusAccepted {
		t.Fatalf("a vote after the reads' budget: %d %s", r.code, r.raw)
	}
	if r := b.do(t, http.MethodGet, "/v1/polls/p1/results", other, "", nil); r.code != http.StatusOK {
		t.Fatalf("another principal's read: %d %s", r.code, r.raw)
	}
	if got := count(ls.srv.LimitMetrics().ReadLimited); got != 2 {
		t.Fatalf("read_rate_limited_total %d, want 2", got)
	}
}

// TestLimiterBudget spends a key's burst, is refused with the wait until
// the next event, and gets events back by time; room tells the same
// without spending, and spend spends even beyond the burst.
func TestLimiterBudget(t *testing.T) {
	t.Parallel()
	l := intake.NewLimiter(10, 3, 100, prometheus.NewCounter(prometheus.CounterOpts{Name: "e"}))
	const a = "192.0.2.1:1000"
	for i := range 3 {
		if _, ok := l.Take(a, 0); !ok {
			t.Fatalf("event %d of a burst of 3 refused", i+1)
		}
	}
	if wait, ok := l.Take(a, 0); ok || wait != 100*time.Millisecond {
		t.Fatalf("4th event at once: ok %v, wait %s; want refused, wait 100ms", ok, wait)
	}
	if n, wait := l.Room(a, 0); n != 0 || wait != 100*time.Millisecond {
		t.Fatalf("room after the burst: %d, wait %s; want 0, wait 100ms", n, wait)
	}
	if _, ok := l.Take(a, 50*time.Millisecond); ok {
		t.Fatal("an event allowed after half an interval")
	}
	if _, ok := l.Take(a, 100*time.Millisecond); !ok {
		t.Fatal("an event refused one interval later")
	}
	if n, _ := l.Room(a, 250*time.Millisecond); n != 1 {
		t.Fatalf("room 150ms after the last event: %d, want 1", n)
	}
	l.Spend(a, 250*time.Millisecond)
	l.Spend(a, 250*time.Millisecond)
	if n, wait := l.Room(a, 250*time.Millisecond); n != 0 || wait != 150*time.Millisecond {
		t.Fatalf("room after spending beyond the burst: %d, wait %s; want 0, wait 150ms", n, wait)
	}
	if _, ok := l.Take("192.0.2.2:1000", 100*time.Millisecond); !ok {
		t.Fatal("another address was refused")
	}
}

// TestLimiterForgets checks that a key is forgotten once its bucket is
// full again, and that the table stays bounded under a flood of keys.
func TestLimiterForgets(t *testing.T) {
	t.Parallel()
	evicted := prometheus.NewCounter(prometheus.CounterOpts{Name: "e"})
	const max = 1000
	l := intake.NewLimiter(1, 5, max, evicted)
	for i := range 50 {
		l.Take("198.51.100."+strconv.Itoa(i)+":1", 0)
	}
	if l.Len() != 50 {
		t.Fatalf("%d keys held after 50 addresses, want 50", l.Len())
	}
	// Each bucket holds 5 s of events; a sweep after that forgets them.
	l.Take("203.0.113.1:1", intake.SweepEvery)
	if l.Len() != 1 {
		t.Fatalf("%d keys held once the others were full again, want 1", l.Len())
	}

	for i := range 20 * max {
		ip := net.IPv4(10, byte(i>>16), byte(i>>8), byte(i)).String()
		if _, ok := l.Take(ip+":1", intake.SweepEvery); !ok {
			t.Fatalf("address %d refused on its first event", i)
		}
		if n := l.Len(); n > max {
			t.Fatalf("%d keys held, above the bound of %d", n, max)
		}
	}
	if testutil.ToFloat64(evicted) == 0 {
		t.Fatal("no eviction counted though the table overflowed")
	}
	// A full table (of keys not yet full) still answers.
	if _, ok := l.Take("203.0.113.2:1", intake.SweepEvery); !ok {
		t.Fatal("a new address refused when the table was full")
	}
}

// TestLimiterAddressKeys checks what one client address is: the IP of
// host:port (an IPv4 address however written) or an IPv6 /64, and that
// the keys are keyed hashes, not the address.
func TestLimiterAddressKeys(t *testing.T) {
	t.Parallel()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "e"})
	l := intake.NewLimiter(1, 1, 10, c)
	for _, same := range [][2]string{
		{"192.0.2.1:1000", "192.0.2.1:2000"},
		{"192.0.2.1:1000", "[::ffff:192.0.2.1]:3000"},
		{"[2001:db8::1]:1000", "[2001:db8::ffff:1]:1000"},
		{"[fe80::1%eth0]:1000", "[fe80::2]:1000"},
		{"not an address", "not an address"},
	} {
		if l.Key(same[0]) != l.Key(same[1]) {
			t.Errorf("%s and %s are one client address but got two keys", same[0], same[1])
		}
	}
	for _, other := range [][2]string{
		{"192.0.2.1:1000", "192.0.2.2:1000"},
		{"[2001:db8::1]:1000", "[2001:db8:0:1::1]:1000"},
		{"", "192.0.2.1:1000"},
	} {
		if l.Key(other[0]) == l.Key(other[1]) {
			t.Errorf("%s and %s are two client addresses but got one key", other[0], other[1])
		}
	}
	if l2 := intake.NewLimiter(1, 1, 10, c); l2.Key("192.0.2.1:1000") == l.Key("192.0.2.1:1000") {
		t.Error("two limiters key an address alike: the hash is not keyed by a seed of its own")
	}
}

// TestLimitConfig checks the limits' settings: each invalid one is
// refused with an error naming it, and +Inf turns a limit off.
func TestLimitConfig(t *testing.T) {
	t.Parallel()
	keys, _ := stream.NewKeys("x", 1)
	store, _ := ledger.New(nil, ledger.Config{})
	for _, tc := range []struct {
		cfg  intake.Config
		want string
	}{
		{intake.Config{AuthFailureRate: -1}, "the failed authentications of one client address per second must be between 0.001 and 1000000, or +Inf"},
		{intake.Config{ReadRate: 0.0001}, "the reads of one principal per second must be between 0.001"},
		{intake.Config{AuthFailureBurst: -1}, "the burst of failed authentications of one client address must be between 1 and 1000000, got -1"},
		{intake.Config{ReadBurst: 2_000_000}, "the burst of reads of one principal must be between 1 and 1000000, got 2000000"},
		{intake.Config{LimitEntries: -1}, "the entries of each table of limits must be at least 1, got -1"},
	} {
		_, err := intake.New(tc.cfg, store, nil, keys, nil, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
	b := setup(t, func(c *config) { c.ReadRate, c.ReadBurst = math.Inf(1), 1 })
	for range 5 {
		wantProblemType(t, b.do(t, http.MethodGet, "/v1/votes/nope", b.token, "", nil), http.StatusNotFound, "not-found")
	}
}

// BenchmarkLimiterTake is the cost of one attempt (the address's key and
// its bucket), from every core at once over 1000 addresses.
func BenchmarkLimiterTake(b *testing.B) {
	l := intake.NewLimiter(1e6, 1_000_000, 100_000, prometheus.NewCounter(prometheus.CounterOpts{Name: "e"}))
	addrs := make([]string, 1000)
	for i := range addrs {
		addrs[i] = net.IPv4(10, 0, byte(i>>8), byte(i)).String() + ":40000"
	}
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for i := int(n.Add(1)); pb.Next(); i++ {
			l.Take(addrs[i%len(addrs)], time.Duration(i))
		}
	})
}

// TestSignedFailureLimitBeforeVerifying floods intake with forged signed
// tokens from one address: past the allowance they get 429 without their
// signature being checked (the credentials counter stops), and so does a
// valid token from that address, which cannot be told from a forged one
// without a check; another address is served as before.
func TestSignedFailureLimitBeforeVerifying(t *testing.T) {
	t.Parallel()
	const burst = 3
	key, err := credential.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	keySet, err := credential.NewKeySet(key)
	if err != nil {
		t.Fatal(err)
	}
	forger, err := credential.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	ls := limitServer(t, intake.Config{AuthFailureRate: 0.001, AuthFailureBurst: burst,
		Credentials: credential.NewVerifier(keySet)})
	if err := ls.srv.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	valid, err := key.Issue("p-valid", time.Now(), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	here := &bundle{url: ls.url, client: clientFrom(t, "127.0.0.1")}
	there := &bundle{url: ls.url, client: clientFrom(t, "127.0.0.2")}
	get := func(b *bundle, token string) reply { return b.do(t, http.MethodGet, "/v1/votes/nope", token, "", nil) }
	invalid := func() int {
		return int(testutil.ToFloat64(ls.srv.Metrics().Credentials.WithLabelValues("invalid")))
	}

	const flood = 20
	for i := range flood {
		forged, err := forger.Issue("p-"+strconv.Itoa(i), time.Now(), time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		r := get(here, forged)
		if i < burst {
			wantProblemType(t, r, http.StatusUnauthorized, "unauthorized")
			continue
		}
		wantProblemType(t, r, http.StatusTooManyRequests, "auth-rate-limited")
	}
	if got := invalid(); got != burst {
		t.Fatalf("%d forged tokens from one address with an allowance of %d: %d signatures checked and refused, want %d",
			flood, burst, got, burst)
	}
	wantProblemType(t, get(here, valid), http.StatusTooManyRequests, "auth-rate-limited")
	wantProblemType(t, get(there, valid), http.StatusNotFound, "not-found")
	if got, want := count(ls.srv.LimitMetrics().AuthLimited), flood-burst+1; got != want {
		t.Fatalf("auth_rate_limited_total %d, want %d", got, want)
	}
}
