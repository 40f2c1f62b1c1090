package intake_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"tally/intake"
	"tally/internal/testenv"
	"tally/ledger"
	"tally/stream"
)

// This file tests intake when what it depends on fails or it stops: a
// hung or dead Redis, and the drain at shutdown.

// TestRedisHung: a Redis that takes the connection and never answers costs
// a vote its request deadline, not Config.RedisTimeout nor the client's
// read timeout, whether its vote was under way or still pending; the
// breaker counts each such vote, and opens at the last one.
func TestRedisHung(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	rdb := intake.HungRedis(t)
	const requestTimeout = 400 * time.Millisecond
	replies := make([]reply, 4)
	b := setup(t, withDB(db), withRedis(rdb, testenv.RandomName("t")), func(c *config) {
		c.RequestTimeout = requestTimeout
		c.RedisTimeout = time.Minute
		// The breaker opens at the last vote's failure, not before: a vote
		// a loaded machine sends after the others failed would find it
		// open and be refused at once, not at its deadline.
		c.BreakerFailures = len(replies)
	})
	var wg sync.WaitGroup
	took := make([]time.Duration, len(replies))
	for i := range replies { // the first ones under way, the others pending
		wg.Go(func() {
			start := time.Now()
			replies[i] = b.vote(t, b.token, "hung"+strconv.Itoa(i), "p1", "a")
			took[i] = time.Since(start)
		})
	}
	testenv.WaitGroup(t, &wg, 30*time.Second, "the answers to votes sent while Redis hung")
	for i, r := range replies {
		wantProblem(t, r, http.StatusServiceUnavailable)
		if r.header.Get("Retry-After") == "" {
			t.Fatalf("503 without Retry-After")
		}
		// What took tells apart is the request deadline from the other
		// two bounds, a minute each; took also holds the client's own
		// time, seconds on a loaded machine.
		if took[i] < requestTimeout || took[i] > requestTimeout+10*time.Second {
			t.Fatalf("503 after %s, want about the request deadline %s, far below the minute of the other bounds", took[i], requestTimeout)
		}
	}
	if st := testutil.ToFloat64(b.m.BreakerState); st != 2 {
		t.Fatalf("breaker state %v after %d votes without an answer, want 2 (open)", st, len(replies))
	}
}

func TestRedisDown(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	server := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: server.Addr, ContextTimeoutEnabled: true, MaxRetries: 1})
	t.Cleanup(func() { rdb.Close() })
	const requestTimeout = 2 * time.Second
	b := setup(t, withDB(db), withRedis(rdb, testenv.RandomName("t")), func(c *config) {
		c.RequestTimeout = requestTimeout
		c.RedisTimeout = 500 * time.Millisecond
		c.BreakerFailures = 3
		// Long enough that the breaker is still open at the sixth vote on
		// a loaded machine (each vote before it opens waits RedisTimeout).
		c.BreakerOpenFor = 2 * time.Second
	})
	if r := b.vote(t, b.token, "before", "p1", "a"); r.code != http.StatusAccepted {
		t.Fatalf("vote with Redis up: %d %s", r.code, r.raw)
	}

	server.Kill()
	for i := range 6 { // enough to open the breaker
		start := time.Now()
		r := b.vote(t, b.token, "down"+strconv.Itoa(i), "p1", "a")
		took := time.Since(start)
		wantProblem(t, r, http.StatusServiceUnavailable)
		if r.header.Get("Retry-After") == "" {
			t.Fatalf("503 without Retry-After")
		}
		// Before the breaker opens a vote may have reached Redis; after, none does.
		if typ := r.str("type"); typ != "urn:tally:problem:maybe-queued" && typ != "urn:tally:problem:not-queued" {
			t.Fatalf("vote %d with Redis down: problem type %q, want maybe-queued or not-queued", i, typ)
		}
		if i == 5 {
			wantProblemType(t, r, http.StatusServiceUnavailable, "not-queued")
		}
		if took > requestTimeout {
			t.Fatalf("503 after %s, over the request deadline %s", took, requestTimeout)
		}
	}
	ready := b.do(t, http.MethodGet, "/readyz", "", "", nil)
	if ready.code != http.StatusServiceUnavailable || ready.str("status") != "not ready" ||
		!strings.Contains(ready.raw, `"redis"`) {
		t.Fatalf("/readyz with Redis down: %d %s", ready.code, ready.raw)
	}
	if st := testutil.ToFloat64(b.m.BreakerState); st != 2 && st != 1 {
		t.Fatalf("breaker state %v, want 2 (open) or 1 (half-open)", st)
	}

	// With no votes coming, /readyz alone closes the breaker again.
	server.Start()
	testenv.Eventually(t, 10*time.Second, "/readyz to answer ready once Redis came back", func() error {
		if r := b.do(t, http.MethodGet, "/readyz", "", "", nil); r.code != http.StatusOK {
			return fmt.Errorf("%d %s", r.code, r.raw)
		}
		return nil
	})
	testenv.Eventually(t, 10*time.Second, "a vote accepted once Redis came back", func() error {
		if r := b.vote(t, b.token, "after", "p1", "a"); r.code != http.StatusAccepted {
			return fmt.Errorf("%d %s", r.code, r.raw)
		}
		return nil
	})
	if n := b.xlen(t); n != 2 {
		t.Fatalf("stream holds %d entries, want 2 (before and after)", n)
	}
	if ready := b.do(t, http.MethodGet, "/readyz", "", "", nil); ready.code != http.StatusOK {
		t.Fatalf("/readyz after recovery: %d %s", ready.code, ready.raw)
	}
}

func TestShutdownDrains(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	rdb, prefix := testenv.Redis(t)
	store, _ := ledger.New(db.Pool, ledger.Config{})
	keys, _ := stream.NewKeys(prefix, 1)
	key, verifier := credentialKey(t)
	srv, err := intake.New(intake.Config{ShutdownTimeout: 2 * time.Second, Credentials: verifier}, store, rdb, keys, testLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &watchedListener{Listener: inner, bodyWanted: make(chan struct{}), closed: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()

	// A request whose body is still coming when the stop begins is answered.
	token := signPrincipals(t, store, key, 1)[0]
	pr, pw := io.Pipe()
	req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/v1/votes", pr)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	got := make(chan int, 1)
	go func() {
		resp, err := checked(t, &http.Client{Transport: tr}).Do(req)
		if err != nil {
			got <- 0
			return
		}
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	pw.Write([]byte(`{"event_id":"e1",`))
	// The stop begins once intake's handler waits for the rest of the body
	// (a stop before the server read the headers drops the connection
	// unanswered: net/http's rule), and the rest comes once it began.
	testenv.Receive(t, ln.bodyWanted, 15*time.Second, "intake to read the request's headers and wait for its body")
	start := time.Now()
	cancel()
	testenv.Receive(t, ln.closed, 15*time.Second, "the stop to close the listener")
	pw.Write([]byte(`"poll_id":"nope","candidate_id":"a"}`))
	pw.Close()
	if code := testenv.Receive(t, got, 15*time.Second, "the answer to the request in flight at shutdown"); code != http.StatusNotFound {
		t.Fatalf("request in flight at shutdown answered %d, want 404 (unknown poll)", code)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return within its shutdown bound")
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("shutdown took %s", took)
	}
	if err := srv.Serve(context.Background(), ln); err == nil {
		t.Fatal("a second Serve succeeded")
	}
}

// watchedListener tells when the server, having read the headers of the
// request on its one connection, reads again (the handler wants more of
// the body), and when it is closed: the events TestShutdownDrains waits
// for.
type watchedListener struct {
	net.Listener
	bodyWanted chan struct{}
	closed     chan struct{}
	closeOnce  sync.Once
}

func (l *watchedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &watchedConn{Conn: c, bodyWanted: l.bodyWanted}, nil
}

// watchedConn closes bodyWanted at the first Read after the one that
// brought the end of the request's headers.
type watchedConn struct {
	net.Conn
	bodyWanted chan struct{}
	read       []byte // what came, up to the end of the headers
	headers    bool   // the end of the headers came
	once       sync.Once
}

func (c *watchedConn) Read(p []byte) (int, error) {
	if c.headers {
		c.once.Do(func() { close(c.bodyWanted) })
	}
	n, err := c.Conn.Read(p)
	if !c.headers {
		c.read = append(c.read, p[:n]...)
		c.headers = bytes.Contains(c.read, []byte("\r\n\r\n"))
	}
	return n, err
}

func (l *watchedListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}
