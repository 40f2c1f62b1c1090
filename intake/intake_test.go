package intake_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"tally/vote"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

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

// bundle is what one test needs: a served intake on a fresh database and a
// unique Redis prefix, a principal and an open poll "p1" with choices a, b.
type bundle struct {
	store  *ledger.Store
	rdb    redis.UniversalClient
	keys   stream.Keys
	url    string
	client *http.Client
	token  string
	who    ledger.Principal
	cfg    intake.Config
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
	keys, err := stream.NewKeys(prefix, 1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := intake.Config{Rate: 1000, Burst: 1000}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := intake.New(cfg, store, rdb, keys, testLogger(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	tr := &http.Transport{MaxIdleConnsPerHost: 32}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	b := &bundle{store: store, rdb: rdb, keys: keys, url: "http://" + ln.Addr().String(),
		client: &http.Client{Transport: tr, Timeout: 10 * time.Second}, cfg: cfg}
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

func (b *bundle) poll(t testing.TB, p ledger.Poll) {
	t.Helper()
	if err := b.store.CreatePoll(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

// reply is an HTTP answer with its body decoded.
type reply struct {
	code   int
	header http.Header
	body   map[string]any
	raw    string
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
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := reply{code: resp.StatusCode, header: resp.Header, raw: string(raw)}
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

func TestVoteAcceptedAndStatus(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	r := b.do(t, http.MethodPost, "/v1/votes", b.token, "application/json; charset=utf-8", voteBody("e1", "p1", "a"))
	if r.code != http.StatusAccepted {
		t.Fatalf("status %d: %s", r.code, r.raw)
	}
	if r.str("event_id") != "e1" || r.str("status") != "pending" || r.str("status_url") != "/v1/votes/e1" {
		t.Fatalf("body %s", r.raw)
	}
	if loc := r.header.Get("Location"); loc != "/v1/votes/e1" {
		t.Fatalf("Location %q", loc)
	}

	msgs, err := b.rdb.XRange(ctx, b.keys.Stream(0), "-", "+").Result()
	if err != nil || len(msgs) != 1 {
		t.Fatalf("stream holds %d entries (%v), want 1", len(msgs), err)
	}
	e, err := stream.Decode(msgs[0].Values)
	if err != nil {
		t.Fatal(err)
	}
	if e.PrincipalID != b.who.ID || e.ClientEventID != "e1" || e.PollID != "p1" || e.CandidateID != "a" ||
		e.Fingerprint != vote.FingerprintHex("p1", "a") || time.Since(e.ReceivedAt) > time.Minute {
		t.Fatalf("entry %+v", e)
	}

	st := b.do(t, http.MethodGet, "/v1/votes/e1", b.token, "", nil)
	if st.code != http.StatusOK || st.str("status") != "pending" || st.str("poll_id") != "p1" || st.str("candidate_id") != "a" {
		t.Fatalf("pending status: %d %s", st.code, st.raw)
	}

	// Another principal's event id is indistinguishable from an unknown one.
	_, other := b.principal(t, "other")
	wantProblem(t, b.do(t, http.MethodGet, "/v1/votes/e1", other, "", nil), http.StatusNotFound)
	wantProblem(t, b.do(t, http.MethodGet, "/v1/votes/nope", b.token, "", nil), http.StatusNotFound)
	wantProblem(t, b.do(t, http.MethodGet, "/v1/votes/bad%20id", b.token, "", nil), http.StatusBadRequest)

	// Once the ledger has it, the ledger answers.
	if _, err := b.store.Append(ctx, []ledger.Event{
		{PrincipalID: e.PrincipalID, ClientEventID: "e1", PollID: "p1", CandidateID: "a", ReceivedAt: e.ReceivedAt},
		{PrincipalID: e.PrincipalID, ClientEventID: "e2", PollID: "p1", CandidateID: "b", ReceivedAt: e.ReceivedAt},
	}); err != nil {
		t.Fatal(err)
	}
	st = b.do(t, http.MethodGet, "/v1/votes/e1", b.token, "", nil)
	if st.code != http.StatusOK || st.str("status") != "recorded" || st.str("candidate_id") != "a" || st.body["reason"] != nil {
		t.Fatalf("recorded status: %d %s", st.code, st.raw)
	}
	st = b.do(t, http.MethodGet, "/v1/votes/e2", b.token, "", nil)
	if st.code != http.StatusOK || st.str("status") != "rejected" || st.str("reason") != "already_responded" {
		t.Fatalf("rejected status: %d %s", st.code, st.raw)
	}
	// The ledger's own reasons beyond DESIGN's four pass through.
	if _, err := b.store.Append(ctx, []ledger.Event{
		{PrincipalID: e.PrincipalID, ClientEventID: "e3", PollID: "gone", CandidateID: "a", ReceivedAt: e.ReceivedAt},
	}); err != nil {
		t.Fatal(err)
	}
	st = b.do(t, http.MethodGet, "/v1/votes/e3", b.token, "", nil)
	if st.code != http.StatusOK || st.str("status") != "rejected" || st.str("reason") != "unknown_poll" {
		t.Fatalf("unknown_poll status: %d %s", st.code, st.raw)
	}
	wantProblem(t, b.do(t, http.MethodGet, "/v1/votes/e1", other, "", nil), http.StatusNotFound)

	res := b.do(t, http.MethodGet, "/v1/polls/p1/results", b.token, "", nil)
	if res.code != http.StatusOK || res.body["total"] != float64(1) || res.str("as_of") == "" {
		t.Fatalf("results: %d %s", res.code, res.raw)
	}
	if got := res.body["results"].([]any)[0].(map[string]any); got["candidate_id"] != "a" || got["votes"] != float64(1) {
		t.Fatalf("results: %s", res.raw)
	}
	wantProblem(t, b.do(t, http.MethodGet, "/v1/polls/nope/results", b.token, "", nil), http.StatusNotFound)
	wantProblem(t, b.do(t, http.MethodGet, "/v1/polls/p1/results", "", "", nil), http.StatusUnauthorized)
}

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
		{"unknown token", "POST", "/v1/votes", "tly_nope", "application/json", ok, 401, "unknown or revoked"},
		{"revoked token", "POST", "/v1/votes", revokedToken, "application/json", ok, 401, "unknown or revoked"},
		{"not json", "POST", "/v1/votes", b.token, "text/plain", ok, 415, `Content-Type "text/plain"`},
		{"no content type", "POST", "/v1/votes", b.token, "", ok, 415, "no Content-Type"},
		{"too large", "POST", "/v1/votes", b.token, "application/json", append(ok, bytes.Repeat([]byte(" "), 5000)...), 413, "4096"},
		{"unknown key", "POST", "/v1/votes", b.token, "application/json", []byte(`{"event_id":"e","poll_id":"p1","candidate_id":"a","principal":"x"}`), 400, `key "principal" is not allowed`},
		{"duplicate key", "POST", "/v1/votes", b.token, "application/json", []byte(`{"event_id":"e","poll_id":"p1","candidate_id":"a","poll_id":"p1"}`), 400, "more than once"},
		{"number", "POST", "/v1/votes", b.token, "application/json", []byte(`{"event_id":1,"poll_id":"p1","candidate_id":"a"}`), 400, "must be a string"},
		{"trailing", "POST", "/v1/votes", b.token, "application/json", append(ok, []byte(`{}`)...), 400, "after the JSON object"},
		{"bad id", "POST", "/v1/votes", b.token, "application/json", voteBody("e/1", "p1", "a"), 400, "forbidden character"},
		{"unknown poll", "POST", "/v1/votes", b.token, "application/json", voteBody("e1", "nope", "a"), 404, `no poll "nope"`},
		{"not eligible", "POST", "/v1/votes", b.token, "application/json", voteBody("e1", "listed", "a"), 403, "eligible"},
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
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || req.ContentLength != 0 {
		t.Fatalf("chunked body over the limit: %d (length %d)", resp.StatusCode, req.ContentLength)
	}
	if n := b.xlen(t); n != 0 {
		t.Fatalf("refused votes enqueued %d entries", n)
	}
}

func TestBacklogFull(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *intake.Config) { c.MaxBacklog = 2; c.BacklogRetryAfter = 3 * time.Second })
	for i := range 2 {
		if r := b.vote(t, b.token, "e"+strconv.Itoa(i), "p1", "a"); r.code != http.StatusAccepted {
			t.Fatalf("vote %d: %d %s", i, r.code, r.raw)
		}
	}
	r := b.vote(t, b.token, "e2", "p1", "a")
	wantProblem(t, r, http.StatusServiceUnavailable)
	if r.header.Get("Retry-After") != "3" {
		t.Fatalf("Retry-After %q, want 3", r.header.Get("Retry-After"))
	}
	if n := b.xlen(t); n != 2 {
		t.Fatalf("stream holds %d entries, want 2", n)
	}
	if st := b.do(t, http.MethodGet, "/v1/votes/e2", b.token, "", nil); st.code != http.StatusNotFound {
		t.Fatalf("a refused vote has a status: %d %s", st.code, st.raw)
	}
	if !strings.Contains(b.metrics(t), "tally_intake_backlog_refusals_total 1") {
		t.Fatal("backlog refusal not counted")
	}
}

func (b *bundle) metrics(t *testing.T) string {
	t.Helper()
	r := b.do(t, http.MethodGet, "/metrics", "", "", nil)
	if r.code != http.StatusOK {
		t.Fatalf("/metrics: %d", r.code)
	}
	return r.raw
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
	wg.Wait()
	for i, r := range replies {
		if r.code != http.StatusAccepted || r.str("event_id") != "same" {
			t.Fatalf("request %d: %d %s", i, r.code, r.raw)
		}
	}
	if got := b.xlen(t); got != 1 {
		t.Fatalf("%d identical requests enqueued %d entries, want 1", n, got)
	}
	if !strings.Contains(b.metrics(t), fmt.Sprintf("tally_intake_idempotent_replays_total %d", n-1)) {
		t.Fatalf("replays not counted:\n%s", b.metrics(t))
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
	b := setup(t, func(c *intake.Config) { c.IdempotencyWindow = time.Hour; c.MaxBacklog = 1 })
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
	want := e.Values()
	if len(msgs[0].Values) != len(want)/2 {
		t.Fatalf("entry has fields %v, want %v", msgs[0].Values, want)
	}
	for i := 0; i < len(want); i += 2 {
		if got := msgs[0].Values[want[i]]; got != want[i+1] {
			t.Fatalf("entry field %q is %v, want %q", want[i], got, want[i+1])
		}
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

// TestIdempotencyLegacyRecord checks that records written by the previous
// enqueue script (a hash) still answer replays, conflicts and status.
func TestIdempotencyLegacyRecord(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	key := b.keys.Idempotency(b.who.ID, "old")
	if err := b.rdb.HSet(ctx, key, "fp", vote.FingerprintHex("p1", "a"), "id", "1-0", "poll", "p1",
		"candidate", "a", "received_at", "1700000000000000").Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.rdb.PExpire(ctx, key, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if r := b.vote(t, b.token, "old", "p1", "a"); r.code != http.StatusAccepted || r.str("event_id") != "old" {
		t.Fatalf("replay of a legacy record: %d %s", r.code, r.raw)
	}
	wantProblem(t, b.vote(t, b.token, "old", "p1", "b"), http.StatusConflict)
	if n := b.xlen(t); n != 0 {
		t.Fatalf("a known key enqueued %d entries", n)
	}
	st := b.do(t, http.MethodGet, "/v1/votes/old", b.token, "", nil)
	if st.code != http.StatusOK || st.str("status") != "pending" || st.str("poll_id") != "p1" || st.str("candidate_id") != "a" {
		t.Fatalf("status of a legacy record: %d %s", st.code, st.raw)
	}
	if !strings.Contains(b.metrics(t), "tally_intake_idempotent_replays_total 1") {
		t.Fatal("legacy replay not counted")
	}
}

func TestRateLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *intake.Config) { c.Rate = 1; c.Burst = 3 })
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
	if !strings.Contains(b.metrics(t), "tally_intake_rate_limited_total 1") {
		t.Fatal("rate limit not counted")
	}
}

// TestRedisHung: a Redis that takes the connection and never answers costs
// a vote its request deadline, not Config.RedisTimeout nor the client's
// read timeout, whether its vote was under way or still pending; the
// breaker counts each such vote.
func TestRedisHung(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	t.Cleanup(func() { ln.Close(); conns.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Go(func() { io.Copy(io.Discard, c); c.Close() })
		}
	}()
	rdb := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), ReadTimeout: time.Minute, MaxRetries: -1,
		ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	const requestTimeout = 400 * time.Millisecond
	b := setupOn(t, db, rdb, testenv.RandomName("t"), func(c *intake.Config) {
		c.RequestTimeout = requestTimeout
		c.RedisTimeout = time.Minute
		c.BreakerFailures = 3
	})
	var wg sync.WaitGroup
	replies := make([]reply, 4)
	took := make([]time.Duration, len(replies))
	for i := range replies { // the first ones under way, the others pending
		wg.Go(func() {
			start := time.Now()
			replies[i] = b.vote(t, b.token, "hung"+strconv.Itoa(i), "p1", "a")
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	for i, r := range replies {
		wantProblem(t, r, http.StatusServiceUnavailable)
		if r.header.Get("Retry-After") == "" {
			t.Fatalf("503 without Retry-After")
		}
		if took[i] < requestTimeout || took[i] > requestTimeout+time.Second {
			t.Fatalf("503 after %s, want about the request deadline %s", took[i], requestTimeout)
		}
	}
	if m := b.metrics(t); !strings.Contains(m, "tally_intake_redis_breaker_state 2") {
		t.Fatalf("breaker did not open after 4 votes without an answer:\n%s", m)
	}
}

func TestRedisDown(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	server := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: server.Addr, ContextTimeoutEnabled: true, MaxRetries: 1})
	t.Cleanup(func() { rdb.Close() })
	const requestTimeout = 2 * time.Second
	b := setupOn(t, db, rdb, testenv.RandomName("t"), func(c *intake.Config) {
		c.RequestTimeout = requestTimeout
		c.RedisTimeout = 500 * time.Millisecond
		c.BreakerFailures = 3
		c.BreakerOpenFor = 500 * time.Millisecond
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
		if took > requestTimeout {
			t.Fatalf("503 after %s, over the request deadline %s", took, requestTimeout)
		}
	}
	ready := b.do(t, http.MethodGet, "/readyz", "", "", nil)
	if ready.code != http.StatusServiceUnavailable || ready.str("status") != "not ready" ||
		!strings.Contains(ready.raw, `"redis"`) {
		t.Fatalf("/readyz with Redis down: %d %s", ready.code, ready.raw)
	}
	if !strings.Contains(b.metrics(t), "tally_intake_redis_breaker_state 2") &&
		!strings.Contains(b.metrics(t), "tally_intake_redis_breaker_state 1") {
		t.Fatalf("breaker did not open:\n%s", b.metrics(t))
	}

	// With no votes coming, /readyz alone closes the breaker again.
	server.Start()
	for deadline := time.Now().Add(10 * time.Second); ; {
		r := b.do(t, http.MethodGet, "/readyz", "", "", nil)
		if r.code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not ready 10s after Redis came back: %s", r.raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := b.vote(t, b.token, "after", "p1", "a")
		if r.code == http.StatusAccepted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery 10s after Redis came back: %d %s", r.code, r.raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := b.xlen(t); n != 2 {
		t.Fatalf("stream holds %d entries, want 2 (before and after)", n)
	}
	if ready := b.do(t, http.MethodGet, "/readyz", "", "", nil); ready.code != http.StatusOK {
		t.Fatalf("/readyz after recovery: %d %s", ready.code, ready.raw)
	}
}

func TestRevocation(t *testing.T) {
	t.Parallel()
	const ttl = 500 * time.Millisecond
	b := setup(t, func(c *intake.Config) { c.AuthTTL = ttl })
	if r := b.vote(t, b.token, "e1", "p1", "a"); r.code != http.StatusAccepted {
		t.Fatalf("vote: %d %s", r.code, r.raw)
	}
	if err := b.store.RevokePrincipal(context.Background(), b.who.ID); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	for i := 0; ; i++ {
		sent := time.Since(revoked)
		r := b.vote(t, b.token, "r"+strconv.Itoa(i), "p1", "a")
		if r.code == http.StatusUnauthorized {
			break
		}
		if sent > ttl {
			t.Fatalf("revoked token accepted in a request sent %s after the revocation: %d", sent, r.code)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := b.do(t, http.MethodGet, "/v1/votes/e1", b.token, "", nil); got.code != http.StatusUnauthorized {
		t.Fatalf("status with a revoked token: %d", got.code)
	}
}

// TestRevocationTTL checks the cache's TTL alone, with no NOTIFY listener:
// the handler is used without Serve.
func TestRevocationTTL(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	rdb, prefix := testenv.Redis(t)
	store, _ := ledger.New(db.Pool, ledger.Config{})
	keys, _ := stream.NewKeys(prefix, 1)
	const ttl = time.Second
	srv, err := intake.New(intake.Config{AuthTTL: ttl}, store, rdb, keys, testLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	p, token, err := store.AddPrincipal(context.Background(), "voter")
	if err != nil {
		t.Fatal(err)
	}
	get := func() int {
		req, _ := http.NewRequest(http.MethodGet, "/v1/votes/x", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		w := &codeRecorder{header: http.Header{}}
		srv.Handler().ServeHTTP(w, req)
		return w.code
	}
	cached := time.Now()
	if c := get(); c != http.StatusNotFound {
		t.Fatalf("status before revocation: %d", c)
	}
	if err := store.RevokePrincipal(context.Background(), p.ID); err != nil {
		t.Fatal(err)
	}
	if c := get(); c != http.StatusNotFound && time.Since(cached) < ttl {
		t.Fatalf("the cache did not answer within its TTL: %d", c)
	}
	time.Sleep(ttl + 50*time.Millisecond)
	if c := get(); c != http.StatusUnauthorized {
		t.Fatalf("revoked token accepted after the TTL: %d", c)
	}
}

type codeRecorder struct {
	header http.Header
	code   int
}

func (w *codeRecorder) Header() http.Header { return w.header }
func (w *codeRecorder) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return len(b), nil
}
func (w *codeRecorder) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

// TestClosedPollByNotify closes a poll while intake runs; with the periodic
// reload far away, only the NOTIFY can tell intake.
func TestClosedPollByNotify(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *intake.Config) { c.CatalogRefresh = time.Hour })
	if r := b.vote(t, b.token, "e0", "p1", "a"); r.code != http.StatusAccepted {
		t.Fatalf("vote: %d %s", r.code, r.raw)
	}
	if err := b.store.ClosePoll(context.Background(), "p1", time.Now()); err != nil {
		t.Fatal(err)
	}
	closed := time.Now()
	accepted := int64(1)
	_, other := b.principal(t, "other")
	for i := 1; ; i++ {
		r := b.vote(t, other, "e"+strconv.Itoa(i), "p1", "a")
		if r.code == http.StatusUnprocessableEntity {
			wantProblem(t, r, http.StatusUnprocessableEntity)
			break
		}
		if r.code != http.StatusAccepted {
			t.Fatalf("vote: %d %s", r.code, r.raw)
		}
		accepted++
		if time.Since(closed) > 3*time.Second {
			t.Fatal("closed poll still open in intake's catalog 3s after the NOTIFY")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := b.xlen(t); n != accepted {
		t.Fatalf("stream holds %d entries, want %d", n, accepted)
	}
	// A poll created while intake runs is served at once.
	b.poll(t, ledger.Poll{ID: "p2", Title: "New", Choices: []string{"x"}})
	if r := b.vote(t, b.token, "new", "p2", "x"); r.code != http.StatusAccepted {
		t.Fatalf("vote on a new poll: %d %s", r.code, r.raw)
	}
}

func TestHealthReadyMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if r := b.do(t, http.MethodGet, "/healthz", "", "", nil); r.code != http.StatusOK || r.str("status") != "ok" {
		t.Fatalf("/healthz: %d %s", r.code, r.raw)
	}
	r := b.do(t, http.MethodGet, "/readyz", "", "", nil)
	if r.code != http.StatusOK || r.str("status") != "ready" {
		t.Fatalf("/readyz: %d %s", r.code, r.raw)
	}
	b.vote(t, b.token, "e1", "p1", "a")
	b.vote(t, b.token, "e2", "p1", "a")
	b.vote(t, b.token, "e2", "p1", "b")
	b.do(t, http.MethodGet, "/nowhere", "", "", nil)
	m := b.metrics(t)
	for _, want := range []string{
		`tally_intake_requests_total{code="202",route="/v1/votes"} 2`,
		`tally_intake_requests_total{code="409",route="/v1/votes"} 1`,
		`tally_intake_requests_total{code="200",route="/readyz"} 1`,
		`tally_intake_requests_total{code="404",route="other"} 1`,
		`tally_intake_request_duration_seconds_count{route="/v1/votes"} 3`,
		`tally_intake_enqueue_duration_seconds_count{outcome="accepted"} 2`,
		`tally_intake_enqueue_duration_seconds_count{outcome="conflict"} 1`,
		`tally_intake_redis_breaker_state 0`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// Only label values that were used appear.
	for _, unwanted := range []string{`outcome="backlog"`, `route="/v1/polls/{poll_id}/results"`, `code="500"`} {
		if strings.Contains(m, unwanted) {
			t.Errorf("/metrics has %s, which was never used", unwanted)
		}
	}
	if strings.Contains(m, b.who.ID) || strings.Contains(m, b.token) {
		t.Error("/metrics names a principal or a token")
	}
}

func TestShutdownDrains(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	rdb, prefix := testenv.Redis(t)
	store, _ := ledger.New(db.Pool, ledger.Config{})
	keys, _ := stream.NewKeys(prefix, 1)
	srv, err := intake.New(intake.Config{ShutdownTimeout: 2 * time.Second}, store, rdb, keys, testLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()

	// A request whose body is still coming when the stop begins is answered.
	_, token, _ := store.AddPrincipal(context.Background(), "voter")
	pr, pw := io.Pipe()
	req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/v1/votes", pr)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	got := make(chan int, 1)
	go func() {
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			got <- 0
			return
		}
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	pw.Write([]byte(`{"event_id":"e1",`))
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	cancel()
	time.Sleep(100 * time.Millisecond)
	pw.Write([]byte(`"poll_id":"nope","candidate_id":"a"}`))
	pw.Close()
	if code := <-got; code != http.StatusNotFound {
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

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	keys, _ := stream.NewKeys("x", 1)
	store, _ := ledger.New(nil, ledger.Config{})
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	for _, cfg := range []intake.Config{
		{Rate: -1}, {Burst: -1}, {MaxBacklog: -5}, {IdempotencyWindow: time.Millisecond},
		{WaitReplicas: -1}, {ReadTimeout: -time.Second}, {RequestTimeout: time.Minute, WriteTimeout: time.Second},
	} {
		_, err := intake.New(cfg, store, rdb, keys, nil, nil)
		if err == nil {
			t.Errorf("New(%+v) accepted an invalid config", cfg)
		}
	}
	if _, err := intake.New(intake.Config{}, store, rdb, keys, nil, nil); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if _, err := intake.New(intake.Config{}, store, rdb, stream.Keys{}, nil, nil); err == nil || !errors.Is(err, err) {
		t.Fatal("zero stream keys accepted")
	}
}

// TestWaitReplicasUnconfirmed asks for a replica the Redis does not have:
// the vote is written but not confirmed, so the answer is 503, and a retry
// (a replay) is not confirmed either.
func TestWaitReplicasUnconfirmed(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *intake.Config) { c.WaitReplicas = 1; c.WaitTimeout = 50 * time.Millisecond })
	for range 2 {
		r := b.vote(t, b.token, "e1", "p1", "a")
		wantProblem(t, r, http.StatusServiceUnavailable)
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

// TestCatalogListenerReconnects kills intake's LISTEN connection; the
// listener reconnects and a poll closed afterwards is still seen at once.
func TestCatalogListenerReconnects(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	rdb, prefix := testenv.Redis(t)
	b := setupOn(t, db, rdb, prefix, func(c *intake.Config) { c.CatalogRefresh = time.Hour })
	ctx := context.Background()
	if r := b.vote(t, b.token, "e0", "p1", "a"); r.code != http.StatusAccepted {
		t.Fatalf("vote: %d %s", r.code, r.raw)
	}
	killed := int64(0)
	for deadline := time.Now().Add(5 * time.Second); killed == 0; {
		if err := db.Pool.QueryRow(ctx, `
SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE datname = current_database() AND query = 'LISTEN tally_catalog'`).Scan(&killed); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("no LISTEN connection found")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Wait for the listener to be back before closing the poll.
	for deadline := time.Now().Add(10 * time.Second); ; {
		var n int
		if err := db.Pool.QueryRow(ctx, `
SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query = 'LISTEN tally_catalog'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the catalog listener did not reconnect within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := b.store.ClosePoll(ctx, "p1", time.Now()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(3 * time.Second); ; {
		r := b.vote(t, b.token, testenv.RandomName("e"), "p1", "a")
		if r.code == http.StatusUnprocessableEntity {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("closed poll still accepted 3s after the NOTIFY: %d", r.code)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
