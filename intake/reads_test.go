package intake_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"tally/internal/testenv"
	"tally/ledger"
	"tally/stream"
)

// This file tests the read endpoints: a vote's status, a poll's results,
// /healthz, /readyz and /metrics.

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
		time.Since(e.ReceivedAt) > time.Minute {
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
	requests := func(route string, code int) int {
		return count(b.m.Requests.WithLabelValues(route, strconv.Itoa(code)))
	}
	// Only label values that were used appear: the vectors hold no other
	// series. Counted before any WithLabelValues below makes one.
	testenv.Eventually(t, 5*time.Second, "requests counted by route and code", func() bool { return testutil.CollectAndCount(b.m.Requests) == 5 })
	if n := testutil.CollectAndCount(b.m.RequestDuration); n != 4 {
		t.Errorf("request durations of %d routes, want 4 (/healthz, /readyz, /v1/votes, other)", n)
	}
	if n := testutil.CollectAndCount(b.m.EnqueueDuration); n != 2 {
		t.Errorf("enqueue durations of %d outcomes, want 2 (accepted, conflict)", n)
	}
	for _, c := range []struct {
		route string
		code  int
		want  int
	}{{"/healthz", 200, 1}, {"/readyz", 200, 1}, {"/v1/votes", 202, 2}, {"/v1/votes", 409, 1}, {"other", 404, 1}} {
		if got := requests(c.route, c.code); got != c.want {
			t.Errorf("requests_total{route=%q,code=\"%d\"} = %d, want %d", c.route, c.code, got, c.want)
		}
	}
	if got := observations(t, b.m.RequestDuration, "/v1/votes"); got != 3 {
		t.Errorf("request durations of /v1/votes: %d, want 3", got)
	}
	if got := observations(t, b.m.EnqueueDuration, "accepted"); got != 2 {
		t.Errorf("enqueue durations of accepted votes: %d, want 2", got)
	}
	if got := observations(t, b.m.EnqueueDuration, "conflict"); got != 1 {
		t.Errorf("enqueue durations of conflicts: %d, want 1", got)
	}
	if st := testutil.ToFloat64(b.m.BreakerState); st != 0 {
		t.Errorf("breaker state %v, want 0 (closed)", st)
	}

	// /metrics serves the registry, and names no principal or token.
	m := b.do(t, http.MethodGet, "/metrics", "", "", nil)
	if m.code != http.StatusOK || !strings.Contains(m.raw, "tally_intake_requests_total") {
		t.Fatalf("/metrics: %d %s", m.code, m.raw)
	}
	if strings.Contains(m.raw, b.who.ID) || strings.Contains(m.raw, b.token) {
		t.Error("/metrics names a principal or a token")
	}
}

// TestReadsRefuseBadPathIDs: an id in the path that breaks the id rule is
// a 400 that names which id and the rule, on both read routes.
func TestReadsRefuseBadPathIDs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct{ path, want string }{
		{"/v1/votes/bad.id", "event ids are 1-64"},
		{"/v1/polls/bad.id/results", "poll ids are 1-64"},
	} {
		r := b.do(t, http.MethodGet, c.path, b.token, "", nil)
		wantProblemType(t, r, http.StatusBadRequest, "invalid-id")
		if !strings.Contains(r.str("detail"), c.want) {
			t.Errorf("GET %s: detail %q, want it to say %q", c.path, r.str("detail"), c.want)
		}
	}
}
