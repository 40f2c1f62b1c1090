package intake_test

import (
	"context"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tally/internal/testenv"
	"tally/ledger"
	"tally/projector"
)

// This file tests what intake does while PostgreSQL does not answer:
// principals keep voting on polls the catalog holds (their credentials
// verify in memory), results answer stale, a vote's status answers
// pending while it must still be in its stream, /readyz reads degraded;
// and that none of it outlives the outage, and that reads within a second
// share one query.

// runProjector applies the bundle's stream to its database until the test
// ends. A batch that failed for good while PostgreSQL was down is claimed
// again after MinIdle.
func runProjector(t *testing.T, b *bundle) {
	t.Helper()
	p, err := projector.New(b.store, b.rdb, b.keys, projector.Config{
		Consumer: "degraded", BatchSize: 100, BatchWait: 5 * time.Millisecond,
		BackoffMin: 10 * time.Millisecond, BackoffMax: 200 * time.Millisecond, BreakerOpenFor: 200 * time.Millisecond,
		MinIdle: time.Second, ClaimInterval: 100 * time.Millisecond,
	}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := testenv.Receive(t, done, 15*time.Second, "the projector to stop once its context ended"); err != nil {
			t.Errorf("projector: %v", err)
		}
	})
}

// status is the answer of GET /v1/votes/{id} for token.
func (b *bundle) status(t *testing.T, token, id string) reply {
	t.Helper()
	return b.do(t, http.MethodGet, "/v1/votes/"+id, token, "", nil)
}

func (b *bundle) results(t *testing.T, token, poll string) reply {
	t.Helper()
	return b.do(t, http.MethodGet, "/v1/polls/"+poll+"/results", token, "", nil)
}

func (b *bundle) readyz(t *testing.T) reply {
	t.Helper()
	return b.do(t, http.MethodGet, "/readyz", "", "", nil)
}

// TestPostgresDownDegraded stops a private PostgreSQL under a running
// intake and projector, checks every answer of the outage, starts it again
// and checks that the votes accepted meanwhile are recorded and the
// answers are fresh again.
func TestPostgresDownDegraded(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	db := pg.Migrated("tally")
	rdb, prefix := testenv.Redis(t)
	const readTTL = 100 * time.Millisecond
	var clk clock
	b := setup(t, withDB(db), withRedis(rdb, prefix), withClock(&clk), func(c *config) {
		c.ReadCacheTTL = readTTL
		c.PostgresTimeout = time.Second
		// The revocation at the end reaches intake by its listener, which
		// reconnects after the outage, or by this check of the change log.
		c.CatalogRefresh = 500 * time.Millisecond
		c.ReadRate = math.Inf(1) // the test polls statuses
	})
	runProjector(t, b)
	ctx := context.Background()

	// Before: the voter and an outsider have voted; the catalog holds p1, p2, restricted (the voter only) and
	// closing, which closes during the outage.
	_, outsider := b.principal(t, "outsider")
	_, stranger := b.principal(t, "stranger") // votes only after the outage
	closesAt := time.Now().Add(4 * time.Second)
	b.poll(t, ledger.Poll{ID: "p2", Title: "Dinner", Choices: []string{"x", "y"}})
	b.poll(t, ledger.Poll{ID: "restricted", Title: "Team", Choices: []string{"a"}, Eligible: []string{b.who.ID}})
	b.poll(t, ledger.Poll{ID: "closing", Title: "Soon closed", Choices: []string{"a"}, ClosesAt: &closesAt})
	wantAccepted(t, b.vote(t, b.token, "e1", "p1", "a"), "e1", ledger.StatusPending)
	wantAccepted(t, b.vote(t, outsider, "o1", "p1", "b"), "o1", ledger.StatusPending)
	testenv.Eventually(t, 5*time.Second, "e1 and o1 recorded", func() bool {
		return b.status(t, b.token, "e1").str("status") == "recorded" && b.status(t, outsider, "o1").str("status") == "recorded"
	})
	before := b.results(t, b.token, "p1")
	if before.code != http.StatusOK || before.body["total"] != float64(2) || before.body["stale"] != nil {
		t.Fatalf("results before the outage: %d %s", before.code, before.raw)
	}
	if r := b.results(t, b.token, "restricted"); r.code != http.StatusOK {
		t.Fatalf("restricted results before the outage: %d %s", r.code, r.raw)
	}
	if r := b.results(t, b.token, "closing"); r.code != http.StatusOK {
		t.Fatalf("closing results before the outage: %d %s", r.code, r.raw)
	}
	// The catalog holds p2 (a choice it does not have is refused), whose
	// results intake never read.
	wantProblemType(t, b.vote(t, outsider, "bad", "p2", "zzz"), http.StatusUnprocessableEntity, "invalid-choice")

	pg.Stop()
	clk.advance(readTTL) // every figure is past its TTL

	t.Run("readyz", func(t *testing.T) {
		r := b.readyz(t)
		if r.code != http.StatusOK || r.str("status") != "degraded" {
			t.Fatalf("/readyz while PostgreSQL is down: %d %s, want 200 degraded", r.code, r.raw)
		}
		if checks, _ := r.body["checks"].(map[string]any); checks["postgres"] != "unreachable" || checks["redis"] != "ok" {
			t.Fatalf("/readyz checks: %s", r.raw)
		}
		if got := count(b.m.PostgresReachable); got != 0 {
			t.Fatalf("tally_intake_postgres_reachable %d, want 0", got)
		}
	})
	xlen := b.xlen(t)
	t.Run("principals vote", func(t *testing.T) {
		wantAccepted(t, b.vote(t, b.token, "e2", "p2", "x"), "e2", ledger.StatusPending)
		wantAccepted(t, b.vote(t, outsider, "o2", "p2", "y"), "o2", ledger.StatusPending)
		wantAccepted(t, b.vote(t, b.token, "e2", "p2", "x"), "e2", ledger.StatusPending)
		if n := b.xlen(t); n != xlen+2 {
			t.Fatalf("the stream holds %d entries, want %d", n, xlen+2)
		}
	})
	t.Run("polls", func(t *testing.T) {
		// The catalog holds every poll: one it does not hold is unknown,
		// answered from memory.
		wantProblemType(t, b.vote(t, b.token, "n1", "not-held", "a"), http.StatusNotFound, "unknown-poll")
		// A poll that closed meanwhile is closed: not accepted (503, since
		// the ledger cannot say whether the event id is known), and
		// nothing is queued.
		time.Sleep(time.Until(closesAt))
		wantProblemType(t, b.vote(t, b.token, "c1", "closing", "a"), http.StatusServiceUnavailable, "not-queued")
		if n := b.xlen(t); n != xlen+2 {
			t.Fatalf("the stream holds %d entries, want %d", n, xlen+2)
		}
	})
	t.Run("results", func(t *testing.T) {
		r := b.results(t, b.token, "p1")
		if r.code != http.StatusOK || r.body["stale"] != true || r.body["total"] != float64(2) || r.str("as_of") != before.str("as_of") {
			t.Fatalf("results while PostgreSQL is down: %d %s, want the figures of %s marked stale", r.code, r.raw, before.raw)
		}
		if r := b.results(t, b.token, "restricted"); r.code != http.StatusOK || r.body["stale"] != true {
			t.Fatalf("restricted results for its eligible principal: %d %s", r.code, r.raw)
		}
		// Cached figures still answer an outsider as for an unknown poll.
		wantProblemType(t, b.results(t, outsider, "restricted"), http.StatusNotFound, "unknown-poll")
		// Figures never read: 503.
		wantProblemType(t, b.results(t, b.token, "p2"), http.StatusServiceUnavailable, "unavailable")
		if got := count(b.m.Degraded.WithLabelValues("stale_results")); got < 2 {
			t.Fatalf("stale_results answers %d, want 2 at least", got)
		}
	})
	t.Run("vote status", func(t *testing.T) {
		r := b.status(t, b.token, "e2")
		if r.code != http.StatusOK || r.str("status") != "pending" || r.str("poll_id") != "p2" {
			t.Fatalf("status of a vote accepted during the outage: %d %s, want pending", r.code, r.raw)
		}
		// e1 was accepted before the outage: it may have been counted, and
		// intake cannot tell.
		wantProblemType(t, b.status(t, b.token, "e1"), http.StatusServiceUnavailable, "unavailable")
		if got := count(b.m.Degraded.WithLabelValues("pending_from_queue")); got != 1 {
			t.Fatalf("pending_from_queue answers %d, want 1", got)
		}
	})

	pg.Start()
	testenv.Eventually(t, 5*time.Second, "e2 and o2 recorded once PostgreSQL is back", func() bool {
		return b.status(t, b.token, "e2").str("status") == "recorded" && b.status(t, outsider, "o2").str("status") == "recorded"
	})
	testenv.Eventually(t, 5*time.Second, "fresh results", func() bool {
		r := b.results(t, b.token, "p2")
		return r.code == http.StatusOK && r.body["stale"] == nil && r.body["total"] == float64(2)
	})
	testenv.Eventually(t, 5*time.Second, "/readyz ready", func() bool { return b.readyz(t).str("status") == "ready" })
	if got := count(b.m.PostgresReachable); got != 1 {
		t.Fatalf("tally_intake_postgres_reachable %d, want 1", got)
	}
	wantAccepted(t, b.vote(t, stranger, "s1", "p1", "a"), "s1", ledger.StatusPending)
	wantProblemType(t, b.vote(t, b.token, "c1", "closing", "a"), http.StatusUnprocessableEntity, "poll-closed")
	if err := b.store.RevokePrincipal(ctx, b.who.ID); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "a revoked token refused", func() bool { return b.vote(t, b.token, "e3", "p1", "a").code == http.StatusUnauthorized })
}

// TestResultsReadOncePerTTL: concurrent and repeated reads of one poll's
// results within Config.ReadCacheTTL cost PostgreSQL one query, for every
// principal that reads them; another poll costs its own.
func TestResultsReadOncePerTTL(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config) { c.ReadCacheTTL, c.ReadRate = time.Hour, math.Inf(1) })
	b.poll(t, ledger.Poll{ID: "p2", Title: "Dinner", Choices: []string{"x"}})
	tokens := []string{b.token}
	for i := range 2 {
		_, tok := b.principal(t, "reader"+strconv.Itoa(i))
		tokens = append(tokens, tok)
	}
	for _, tok := range tokens { // verified once, so that no read waits on a token lookup
		if r := b.status(t, tok, "none"); r.code != http.StatusNotFound {
			t.Fatalf("status: %d %s", r.code, r.raw)
		}
	}
	var wg sync.WaitGroup
	codes := make(chan int, 8*len(tokens))
	for _, tok := range tokens {
		for range 8 {
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodGet, b.url+"/v1/polls/p1/results", nil)
				req.Header.Set("Authorization", "Bearer "+tok)
				resp, err := checked(t, b.client).Do(req)
				if err != nil {
					codes <- 0
					return
				}
				resp.Body.Close()
				codes <- resp.StatusCode
			})
		}
	}
	testenv.WaitGroup(t, &wg, 30*time.Second, "the answers to the results requests")
	close(codes)
	for c := range codes {
		if c != http.StatusOK {
			t.Fatalf("a concurrent read answered %d", c)
		}
	}
	if r := b.results(t, b.token, "p1"); r.code != http.StatusOK || r.body["stale"] != nil {
		t.Fatalf("a read after them: %d %s", r.code, r.raw)
	}
	if got := count(b.m.ResultsQueries); got != 1 {
		t.Fatalf("%d reads of p1 cost %d queries, want 1", 8*len(tokens)+1, got)
	}
	if r := b.results(t, b.token, "p2"); r.code != http.StatusOK {
		t.Fatalf("p2: %d %s", r.code, r.raw)
	}
	if got := count(b.m.ResultsQueries); got != 2 {
		t.Fatalf("a read of another poll: %d queries in all, want 2", got)
	}
}
