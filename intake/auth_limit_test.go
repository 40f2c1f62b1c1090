package intake_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"tally/intake"
	"tally/internal/testenv"
	"tally/ledger"
	"tally/stream"
)

// This file tests how token lookups from one client address are held
// against its allowance of failed authentications: lookups under way spend
// none of it, only refused tokens do, and no more lookups run at once than
// the allowance has room for.

// authBurst is the allowance of failed authentications of these tests; a
// rate this low refills nothing while a test runs.
const authBurst = 5

// lookupBundle is an intake whose token lookups are counted, with the
// database behind it, where a test can hold them all back. Its handler is
// served without Serve, so no NOTIFY of the principals table clears the
// token cache while a test relies on it.
type lookupBundle struct {
	*bundle
	db      testenv.DB
	lookups *queryCounter
}

func setupLookups(t *testing.T) *lookupBundle {
	t.Helper()
	db := testenv.Postgres(t)
	store, lookups := countingStore(t, db)
	rdb, prefix := testenv.Redis(t)
	keys, _ := stream.NewKeys(prefix, 1)
	cfg := intake.Config{Rate: 1000, Burst: 1000, AuthFailureRate: 0.001, AuthFailureBurst: authBurst, AuthTTL: time.Hour}
	srv, err := intake.New(cfg, store, rdb, keys, testLogger(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	b := &bundle{store: store, rdb: rdb, keys: keys, url: ts.URL, client: ts.Client(), cfg: cfg, m: srv.Metrics(), srv: srv, handlerOnly: true}
	b.who, b.token = b.principal(t, "voter")
	b.poll(t, ledger.Poll{ID: "p1", Title: "Lunch", Choices: []string{"a", "b"}})
	return &lookupBundle{bundle: b, db: db, lookups: lookups}
}

// holdLookups makes every token lookup wait, until release is called, on
// a lock of the principals table.
func (b *lookupBundle) holdLookups(t *testing.T) (release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, b.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE principals IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			tx.Rollback(ctx)
			conn.Close(ctx)
		})
	}
	t.Cleanup(release)
	return release
}

// waitForHeldLookup returns once a token lookup waits on the lock of
// holdLookups and the other requests under way had time to get as far.
func (b *lookupBundle) waitForHeldLookup(t *testing.T) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, "a token lookup waits on the lock of the principals table", func() bool {
		var n int
		err := b.db.Pool.QueryRow(context.Background(), `
SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'principals'::regclass`).Scan(&n)
		return err == nil && n > 0
	})
	time.Sleep(300 * time.Millisecond)
}

// postAll posts one vote with each token at once from one address, while
// their lookups are held back until one waits, and returns the status
// codes in order.
func (b *lookupBundle) postAll(t *testing.T, tokens []string) []int {
	t.Helper()
	release := b.holdLookups(t)
	return b.postAtOnce(t, tokens, func() {
		b.waitForHeldLookup(t)
		release()
	})
}

// TestConcurrentNewTokensFromOneAddress sends the first votes of many
// principals at once from one address (a kiosk, a NAT), more than the
// allowance of failed authentications, while PostgreSQL is slow to answer
// their lookups: every one is accepted, and the allowance is still whole
// afterwards.
func TestConcurrentNewTokensFromOneAddress(t *testing.T) {
	t.Parallel()
	b := setupLookups(t)
	tokens := make([]string, authBurst+20)
	for i := range tokens {
		_, tokens[i] = b.principal(t, fmt.Sprintf("voter %d", i))
	}
	for i, c := range b.postAll(t, tokens) {
		if c != http.StatusAccepted {
			t.Errorf("vote %d of %d valid new tokens from one address: status %d, want 202", i, len(tokens), c)
		}
	}
	for i := range authBurst {
		r := b.vote(t, "tly_bad-"+rand.Text(), fmt.Sprintf("x-%d", i), "p1", "a")
		wantProblemType(t, r, http.StatusUnauthorized, "unauthorized")
	}
	wantProblemType(t, b.vote(t, "tly_bad-"+rand.Text(), "x", "p1", "a"), http.StatusTooManyRequests, "auth-rate-limited")
}

// TestConcurrentBadTokensFromOneAddress floods intake with bad tokens
// sent at once from one address while their lookups are held back: no
// more reach PostgreSQL than the allowance, the rest get 429, and a token
// cached as valid from that address is still served.
func TestConcurrentBadTokensFromOneAddress(t *testing.T) {
	t.Parallel()
	b := setupLookups(t)
	wantProblemType(t, b.do(t, http.MethodGet, "/v1/votes/nope", b.token, "", nil), http.StatusNotFound, "not-found") // cached
	tokens := make([]string, 40)
	for i := range tokens {
		tokens[i] = "tly_bad-" + rand.Text()
	}
	before := b.lookups.n.Load()
	counts := map[int]int{}
	for _, c := range b.postAll(t, tokens) {
		counts[c]++
	}
	if want := map[int]int{http.StatusUnauthorized: authBurst, http.StatusTooManyRequests: len(tokens) - authBurst}; fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("%d bad tokens at once from one address: statuses %v, want %v", len(tokens), counts, want)
	}
	if got := b.lookups.n.Load() - before; got != authBurst {
		t.Errorf("%d bad tokens at once from one address made %d token lookups in PostgreSQL, want %d (the allowance)", len(tokens), got, authBurst)
	}
	if r := b.vote(t, b.token, "after", "p1", "a"); r.code != http.StatusAccepted {
		t.Errorf("a vote with a cached valid token after the flood: %d %s", r.code, r.raw)
	}
}
