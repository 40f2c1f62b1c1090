package client_test

import (
	"errors"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tally/client"
	"tally/client/internal/clienttest"
	"tally/intake"
	"tally/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// newClient is a client of in as token, each exchange checked against the
// document.
func newClient(t *testing.T, in *clienttest.Intake, token string, cfg client.Config) *client.Client {
	t.Helper()
	cfg.BaseURL, cfg.Token = in.URL, token
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = in.HTTP
	}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// createPoll creates poll id with choices a and b as in's admin, and
// waits until intake's catalog holds it (a voter's read of its results
// is no longer 404).
func createPoll(t *testing.T, in *clienttest.Intake, id string) {
	t.Helper()
	ctx := t.Context()
	p, err := newClient(t, in, in.Admin, client.Config{}).CreatePoll(ctx, client.PollRequest{PollId: id, Title: "Lunch", Choices: []string{"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if p.PollId != id || len(p.Choices) != 2 {
		t.Fatalf("created poll %+v, want %s with choices a, b", p, id)
	}
	reader := newClient(t, in, in.Other, client.Config{})
	testenv.Eventually(t, 15*time.Second, "intake's catalog to hold poll "+id, func() error {
		_, err := reader.Results(ctx, id)
		if p := (*client.Problem)(nil); err != nil && (!errors.As(err, &p) || p.Status != http.StatusNotFound) {
			t.Fatalf("waiting for intake's catalog to hold poll %s: %v", id, err)
		}
		return err
	})
}

// problemOf is err's *Problem, failing t when it has none.
func problemOf(t *testing.T, err error) *client.Problem {
	t.Helper()
	var p *client.Problem
	if !errors.As(err, &p) {
		t.Fatalf("error %v (%T), want one that wraps a *client.Problem", err, err)
	}
	if p.Title == "" || p.Detail == "" {
		t.Errorf("problem %+v: want its title and detail", p)
	}
	return p
}

// The generated client with its layer drives a real intake: a poll is
// created, a vote sent and sent again with its event id, its status and
// the poll's results read, and a bad vote refused with a typed problem.
func TestClientAgainstIntake(t *testing.T) {
	t.Parallel()
	in := clienttest.Start(t, intake.Config{})
	ctx := t.Context()
	createPoll(t, in, "lunch")
	voter := newClient(t, in, in.Voter, client.Config{})

	a := "a"
	acc, err := voter.Vote(ctx, client.Vote{PollId: "lunch", CandidateId: &a})
	if err != nil {
		t.Fatal(err)
	}
	if acc.EventId == "" || acc.StatusUrl != "/v1/votes/"+acc.EventId {
		t.Fatalf("accepted %+v: want the event id the client made and its status URL", acc)
	}
	again, err := voter.Vote(ctx, client.Vote{EventId: acc.EventId, PollId: "lunch", CandidateId: &a})
	if err != nil || again.EventId != acc.EventId {
		t.Fatalf("the same vote again: %+v, %v; want 202 for event %s", again, err, acc.EventId)
	}

	st := waitOutcome(t, voter, acc.EventId)
	if st.Status != client.Recorded || st.PollId != "lunch" || st.CandidateId == nil || *st.CandidateId != "a" {
		t.Fatalf("status %+v: want recorded, poll lunch, candidate a", st)
	}
	// Results are read at most once a second per poll (ReadCacheTTL): an
	// answer from before the vote was recorded may come first.
	var res *client.Results
	testenv.Eventually(t, 10*time.Second, "the results to count the vote", func() bool {
		if res, err = voter.Results(ctx, "lunch"); err != nil {
			t.Fatal(err)
		}
		return res.Total > 0
	})
	if res.Total != 1 || len(res.Results) != 2 || res.Results[0].CandidateId != "a" || res.Results[0].Votes != 1 {
		t.Fatalf("results %+v: want one vote, for a", res)
	}

	zz := "zz"
	_, err = voter.Vote(ctx, client.Vote{PollId: "lunch", CandidateId: &zz})
	if p := problemOf(t, err); p.Status != http.StatusUnprocessableEntity || p.Type != client.ProblemTypeUrnTallyProblemInvalidChoice || p.Slug() != "invalid-choice" {
		t.Fatalf("a vote for no choice: %+v, want 422 invalid-choice", p)
	}
	b := "b"
	_, err = voter.Vote(ctx, client.Vote{EventId: acc.EventId, PollId: "lunch", CandidateId: &b})
	if p := problemOf(t, err); p.Status != http.StatusConflict || p.Type != client.ProblemTypeUrnTallyProblemKeyReused {
		t.Fatalf("the event id again with another candidate: %+v, want 409 key-reused", p)
	}
	_, err = newClient(t, in, "", client.Config{}).VoteStatus(ctx, acc.EventId)
	if p := problemOf(t, err); p.Status != http.StatusUnauthorized || p.Type != client.ProblemTypeUrnTallyProblemUnauthorized {
		t.Fatalf("a read without a token: %+v, want 401 unauthorized", p)
	}
}

// waitOutcome reads the status of event id until it is no longer pending.
func waitOutcome(t *testing.T, c *client.Client, id string) *client.EventStatus {
	t.Helper()
	var st *client.EventStatus
	testenv.Eventually(t, 20*time.Second, "event "+id+" to be no longer pending (is the projector running?)", func() bool {
		var err error
		if st, err = c.VoteStatus(t.Context(), id); err != nil {
			t.Fatal(err)
		}
		return st.Status != client.Pending
	})
	return st
}

// counting counts the requests it sends.
type counting struct {
	n    atomic.Int64
	next client.HttpRequestDoer
}

func (c *counting) Do(req *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.Do(req)
}

// A vote refused 429 is sent again after its Retry-After, and counted
// once; with one attempt allowed the 429 comes back as a Problem that
// carries its Retry-After.
func TestClientHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	in := clienttest.Start(t, intake.Config{Rate: 0.5, Burst: 1})
	ctx := t.Context()
	createPoll(t, in, "lunch")
	sent := &counting{next: in.HTTP}
	voter := newClient(t, in, in.Voter, client.Config{HTTPClient: sent})
	a := "a"
	if _, err := voter.Vote(ctx, client.Vote{PollId: "lunch", CandidateId: &a}); err != nil {
		t.Fatal(err)
	}
	other := newClient(t, in, in.Other, client.Config{HTTPClient: sent})
	if _, err := other.Vote(ctx, client.Vote{PollId: "lunch", CandidateId: &a}); err != nil {
		t.Fatal(err)
	}

	once := newClient(t, in, in.Voter, client.Config{HTTPClient: sent, MaxAttempts: 1})
	_, err := once.Vote(ctx, client.Vote{PollId: "lunch", CandidateId: &a})
	p := problemOf(t, err)
	if p.Status != http.StatusTooManyRequests || p.Type != client.ProblemTypeUrnTallyProblemRateLimited || p.RetryAfter < time.Second {
		t.Fatalf("a second vote at once, one attempt: %+v; want 429 rate-limited with its Retry-After", p)
	}
	if !strings.Contains(err.Error(), "gave up after 1 attempts") {
		t.Errorf("error %q: want it to say it gave up after one attempt", err)
	}

	before := sent.n.Load()
	start := time.Now()
	acc, err := voter.Vote(ctx, client.Vote{PollId: "lunch", CandidateId: &a})
	if err != nil {
		t.Fatalf("a vote refused 429 then sent again after Retry-After: %v", err)
	}
	if n := sent.n.Load() - before; n < 2 {
		t.Fatalf("the vote took %d requests, want the 429 and at least one more", n)
	}
	if waited := time.Since(start); waited < p.RetryAfter {
		t.Fatalf("the vote was sent again after %s, before its Retry-After of %s", waited, p.RetryAfter)
	}
	// The principal already answered: the ledger rejects the second ballot.
	if st := waitOutcome(t, voter, acc.EventId); st.Status != client.Rejected {
		t.Fatalf("a second ballot of a final poll: %+v, want rejected", st)
	}

	short := newClient(t, in, in.Voter, client.Config{HTTPClient: sent, MaxElapsed: 500 * time.Millisecond})
	_, err = short.Vote(ctx, client.Vote{PollId: "lunch", CandidateId: &a})
	if p := problemOf(t, err); p.Status != http.StatusTooManyRequests || !strings.Contains(err.Error(), "Config.MaxElapsed") {
		t.Fatalf("a 429 whose Retry-After is past the call's bound: %v; want the 429, the bound named", err)
	}
}

// A Config that cannot work is refused before any request, saying which
// setting is wrong.
func TestNewRefusesBadConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  client.Config
		want string
	}{
		{client.Config{}, "base URL"},
		{client.Config{BaseURL: "127.0.0.1:8080"}, "base URL"},
		{client.Config{BaseURL: "ftp://intake"}, "base URL"},
		{client.Config{BaseURL: "http://intake", MaxAttempts: -1}, "attempts"},
		{client.Config{BaseURL: "http://intake", BackoffMin: time.Second, BackoffMax: time.Millisecond}, "backoff"},
	} {
		if _, err := client.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): %v; want an error naming %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := client.New(client.Config{BaseURL: "http://intake"}); err != nil {
		t.Errorf("New with a base URL alone: %v", err)
	}
}

// Event ids are valid ids, and fresh.
func TestNewEventID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := client.NewEventID()
		if len(id) != 22 || strings.Trim(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") != "" || seen[id] {
			t.Fatalf("event id %q: want 22 fresh characters of [A-Za-z0-9_-]", id)
		}
		seen[id] = true
	}
}
