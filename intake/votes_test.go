package intake_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"tally/internal/testenv"
	"tally/ledger"
	"tally/stream"
)

// This file tests the vote path, POST /v1/votes: every refusal, and each
// outcome of the enqueue script as the client and Redis see it.

// TestRefusals provokes every refusal of POST /v1/votes and checks that
// nothing was enqueued.
func TestRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	past := time.Now().Add(-time.Hour)
	closed := time.Now().Add(-time.Minute)
	b.poll(t, ledger.Poll{ID: "closed", Title: "Closed", OpensAt: past, ClosesAt: &closed, Choices: []string{"a"}})
	b.poll(t, ledger.Poll{ID: "later", Title: "Later", OpensAt: time.Now().Add(time.Hour), Choices: []string{"a"}})
	insider, _ := b.principal(t, "insider")
	b.poll(t, ledger.Poll{ID: "listed", Title: "Listed", Choices: []string{"a"}, Eligible: []string{insider.ID}})
	revoked, revokedToken := b.principal(t, "revoked")
	if err := b.store.RevokePrincipal(context.Background(), revoked.ID); err != nil {
		t.Fatal(err)
	}
	b.waitRevoked(t, revoked.ID)
	ok := voteBody("e1", "p1", "a")

	cases := []struct {
		name        string
		method      string
		path        string
		token       string
		contentType string
		body        []byte
		code        int
		detail      string
	}{
		{"no token", "POST", "/v1/votes", "", "application/json", ok, 401, "no Authorization header"},
		{"stored-kind token", "POST", "/v1/votes", "tly_nope", "application/json", ok, 401, "issue your principal a signed credential"},
		{"revoked token", "POST", "/v1/votes", revokedToken, "application/json", ok, 401, "principal was revoked"},
		{"not json", "POST", "/v1/votes", b.token, "text/plain", ok, 415, `Content-Type "text/plain"`},
		{"no content type", "POST", "/v1/votes", b.token, "", ok, 415, "no Content-Type"},
		{"too large", "POST", "/v1/votes", b.token, "application/json", append(ok, bytes.Repeat([]byte(" "), 5000)...), 413, "4096"},
		{"unknown key", "POST", "/v1/votes", b.token, "application/json", []byte(`{"event_id":"e","poll_id":"p1","candidate_id":"a","principal":"x"}`), 400, `key "principal" is not allowed`},
		{"duplicate key", "POST", "/v1/votes", b.token, "application/json", []byte(`{"event_id":"e","poll_id":"p1","candidate_id":"a","poll_id":"p1"}`), 400, "more than once"},
		{"number", "POST", "/v1/votes", b.token, "application/json", []byte(`{"event_id":1,"poll_id":"p1","candidate_id":"a"}`), 400, "must be a string"},
		{"trailing", "POST", "/v1/votes", b.token, "application/json", append(ok, []byte(`{}`)...), 400, "after the JSON object"},
		{"bad id", "POST", "/v1/votes", b.token, "application/json", voteBody("e/1", "p1", "a"), 400, "forbidden character"},
		{"unknown poll", "POST", "/v1/votes", b.token, "application/json", voteBody("e1", "nope", "a"), 404, `no poll "nope"`},
		{"not eligible", "POST", "/v1/votes", b.token, "application/json", voteBody("e1", "listed", "a"), 404, `no poll "listed"`},
		{"closed poll", "POST", "/v1/votes", b.token, "application/json", voteBody("e1", "closed", "a"), 422, "closed at"},
		{"not yet open", "POST", "/v1/votes", b.token, "application/json", voteBody("e1", "later", "a"), 422, "opens at"},
		{"invalid choice", "POST", "/v1/votes", b.token, "application/json", voteBody("e1", "p1", "z"), 422, `"z" is not a choice`},
		{"wrong method", "PUT", "/v1/votes", b.token, "application/json", ok, 405, "takes POST"},
		{"no route", "GET", "/v2/nothing", b.token, "", nil, 404, "no such route"},
	}
	for _, tc := range cases {
		r := b.do(t, tc.method, tc.path, tc.token, tc.contentType, tc.body)
		if r.code != tc.code {
			t.Errorf("%s: status %d, want %d: %s", tc.name, r.code, tc.code, r.raw)
			continue
		}
		wantProblem(t, r, tc.code)
		if !strings.Contains(r.str("detail"), tc.detail) {
			t.Errorf("%s: detail %q, want it to contain %q", tc.name, r.str("detail"), tc.detail)
		}
		if tc.code == 401 && !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: WWW-Authenticate %q", tc.name, r.header.Get("WWW-Authenticate"))
		}
	}
	// A body of unknown length is cut off at the limit too.
	req, _ := http.NewRequest(http.MethodPost, b.url+"/v1/votes",
		io.MultiReader(bytes.NewReader(ok), bytes.NewReader(bytes.Repeat([]byte(" "), 5000))))
	req.Header.Set("Authorization", "Bearer "+b.token)
	req.Header.Set("Content-Type", "application/json")
	if r := b.send(t, req); r.code != http.StatusRequestEntityTooLarge || req.ContentLength != 0 {
		t.Fatalf("chunked body over the limit: %d (length %d)", r.code, req.ContentLength)
	}
	if n := b.xlen(t); n != 0 {
		t.Fatalf("refused votes enqueued %d entries", n)
	}
}

func TestBacklogFull(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config) { c.MaxBacklog = 2; c.BacklogRetryAfter = 3 * time.Second })
	for i := range 2 {
		if r := b.vote(t, b.token, "e"+strconv.Itoa(i), "p1", "a"); r.code != http.StatusAccepted {
			t.Fatalf("vote %d: %d %s", i, r.code, r.raw)
		}
	}
	r := b.vote(t, b.token, "e2", "p1", "a")
	wantProblemType(t, r, http.StatusServiceUnavailable, "backlog-full")
	if r.header.Get("Retry-After") != "3" {
		t.Fatalf("Retry-After %q, want 3", r.header.Get("Retry-After"))
	}
	if n := b.xlen(t); n != 2 {
		t.Fatalf("stream holds %d entries, want 2", n)
	}
	if st := b.do(t, http.MethodGet, "/v1/votes/e2", b.token, "", nil); st.code != http.StatusNotFound {
		t.Fatalf("a refused vote has a status: %d %s", st.code, st.raw)
	}
	if got := count(b.m.BacklogRefusals); got != 1 {
		t.Fatalf("%d backlog refusals counted, want 1", got)
	}
}

func TestIdempotency(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 20
	replies := make([]reply, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { replies[i] = b.vote(t, b.token, "same", "p1", "a") })
	}
	testenv.WaitGroup(t, &wg, 30*time.Second, "the answers to 20 votes with one key")
	for i, r := range replies {
		if r.code != http.StatusAccepted || r.str("event_id") != "same" {
			t.Fatalf("request %d: %d %s", i, r.code, r.raw)
		}
	}
	if got := b.xlen(t); got != 1 {
		t.Fatalf("%d identical requests enqueued %d entries, want 1", n, got)
	}
	if got := count(b.m.Replays); got != n-1 {
		t.Fatalf("%d replays counted, want %d", got, n-1)
	}

	// The same key with another payload is refused and changes nothing.
	wantProblem(t, b.vote(t, b.token, "same", "p1", "b"), http.StatusConflict)
	if got := b.xlen(t); got != 1 {
		t.Fatalf("a reused key enqueued: %d entries", got)
	}
	st := b.do(t, http.MethodGet, "/v1/votes/same", b.token, "", nil)
	if st.str("candidate_id") != "a" {
		t.Fatalf("the reused key changed the record: %s", st.raw)
	}

	// Keys are scoped to the principal: another one may use the same key.
	_, other := b.principal(t, "other")
	if r := b.vote(t, other, "same", "p1", "b"); r.code != http.StatusAccepted {
		t.Fatalf("another principal's key: %d %s", r.code, r.raw)
	}
	if got := b.xlen(t); got != 2 {
		t.Fatalf("stream holds %d entries, want 2", got)
	}
}

// TestIdempotencyRecord checks what a vote leaves in Redis: its stream
// entry is exactly the stream package's encoding, and its idempotency
// record lives for the configured window; a refused vote leaves none.
func TestIdempotencyRecord(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config) { c.IdempotencyWindow = time.Hour; c.MaxBacklog = 1 })
	ctx := context.Background()
	if r := b.vote(t, b.token, "e1", "p1", "a"); r.code != http.StatusAccepted {
		t.Fatalf("vote: %d %s", r.code, r.raw)
	}
	msgs, err := b.rdb.XRange(ctx, b.keys.Stream(0), "-", "+").Result()
	if err != nil || len(msgs) != 1 {
		t.Fatalf("stream holds %d entries (%v), want 1", len(msgs), err)
	}
	e, err := stream.Decode(msgs[0].Values)
	if err != nil {
		t.Fatal(err)
	}
	if want := stream.Encode(e); len(msgs[0].Values) != 1 || msgs[0].Values[stream.FieldEntry] != want {
		t.Fatalf("entry has fields %v, want only %s: %q", msgs[0].Values, stream.FieldEntry, want)
	}
	ttl, err := b.rdb.PTTL(ctx, b.keys.Idempotency(b.who.ID, "e1")).Result()
	if err != nil || ttl <= 59*time.Minute || ttl > time.Hour {
		t.Fatalf("the record expires in %s (%v), want about 1h", ttl, err)
	}

	// Over the backlog: refused, and no record is left behind.
	wantProblem(t, b.vote(t, b.token, "e2", "p1", "a"), http.StatusServiceUnavailable)
	if n, err := b.rdb.Exists(ctx, b.keys.Idempotency(b.who.ID, "e2")).Result(); err != nil || n != 0 {
		t.Fatalf("a refused vote left a record (%d, %v)", n, err)
	}
}

func TestRateLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config) { c.Rate = 1; c.Burst = 3 })
	for i := range 3 {
		if r := b.vote(t, b.token, "e"+strconv.Itoa(i), "p1", "a"); r.code != http.StatusAccepted {
			t.Fatalf("vote %d within the burst: %d %s", i, r.code, r.raw)
		}
	}
	r := b.vote(t, b.token, "e3", "p1", "a")
	wantProblem(t, r, http.StatusTooManyRequests)
	after, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || after != 1 {
		t.Fatalf("Retry-After %q, want 1", r.header.Get("Retry-After"))
	}
	if n := b.xlen(t); n != 3 {
		t.Fatalf("stream holds %d entries, want 3", n)
	}
	// A replay is not a new vote: it is answered whatever the rate.
	if r := b.vote(t, b.token, "e0", "p1", "a"); r.code != http.StatusAccepted {
		t.Fatalf("replay while limited: %d %s", r.code, r.raw)
	}
	// Another principal has its own bucket.
	_, other := b.principal(t, "other")
	if r := b.vote(t, other, "e0", "p1", "a"); r.code != http.StatusAccepted {
		t.Fatalf("another principal: %d %s", r.code, r.raw)
	}
	time.Sleep(time.Duration(after) * time.Second)
	if r := b.vote(t, b.token, "e3", "p1", "a"); r.code != http.StatusAccepted {
		t.Fatalf("after Retry-After: %d %s", r.code, r.raw)
	}
	if n := b.xlen(t); n != 5 {
		t.Fatalf("stream holds %d entries, want 5", n)
	}
	if got := count(b.m.RateLimited); got != 1 {
		t.Fatalf("%d rate-limited votes counted, want 1", got)
	}
}

// TestWaitReplicasUnconfirmed asks for a replica the Redis does not have:
// the vote is written but not confirmed, so the answer is 503, and a retry
// (a replay) is not confirmed either.
func TestWaitReplicasUnconfirmed(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config) { c.WaitReplicas = 1; c.WaitTimeout = 50 * time.Millisecond })
	for range 2 {
		r := b.vote(t, b.token, "e1", "p1", "a")
		wantProblemType(t, r, http.StatusServiceUnavailable, "maybe-queued")
		if !strings.Contains(r.str("detail"), "only 0 of 1 Redis replicas") || r.header.Get("Retry-After") == "" {
			t.Fatalf("unconfirmed vote: %s", r.raw)
		}
	}
	if n := b.xlen(t); n != 1 {
		t.Fatalf("stream holds %d entries, want 1 (written once, unconfirmed)", n)
	}
	// Refusals need no confirmation.
	wantProblem(t, b.vote(t, b.token, "e1", "p1", "b"), http.StatusConflict)
}
