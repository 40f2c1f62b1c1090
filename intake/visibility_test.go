package intake_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"tally/ledger"
)

// This file tests what a principal may not see: a restricted poll's
// results, and the status of events, answer a principal outside the poll's
// eligibility list as they would for a poll that does not exist.

// sameAnswer fails t unless got and want are the same answer once want's
// from is replaced by to: status, headers (but Date) and body.
func sameAnswer(t *testing.T, what string, got, want reply, from, to string) {
	t.Helper()
	if len(from) != len(to) {
		t.Fatalf("%s: %q and %q must be of the same length, so that Content-Length compares", what, from, to)
	}
	wantRaw := strings.ReplaceAll(want.raw, from, to)
	if got.code != want.code || got.raw != wantRaw {
		t.Fatalf("%s: the answers tell the two apart:\n got  %d %s\n want %d %s", what, got.code, got.raw, want.code, wantRaw)
	}
	for _, h := range []http.Header{got.header, want.header} {
		h.Del("Date")
	}
	if len(got.header) != len(want.header) {
		t.Fatalf("%s: headers %v, want %v", what, got.header, want.header)
	}
	for k := range want.header {
		if got.header.Get(k) != want.header.Get(k) {
			t.Fatalf("%s: header %s is %q, want %q", what, k, got.header.Get(k), want.header.Get(k))
		}
	}
}

func TestRestrictedResultsLookUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	insider, insiderToken := b.principal(t, "insider")
	b.poll(t, ledger.Poll{ID: "secret", Title: "Board", Choices: []string{"x", "y"}, Eligible: []string{insider.ID}})
	if _, err := b.store.Append(ctx, []ledger.Event{
		{PrincipalID: insider.ID, ClientEventID: "i1", PollID: "secret", CandidateID: "y", ReceivedAt: time.Now()},
	}); err != nil {
		t.Fatal(err)
	}

	// Twice: the first request may look the poll up in PostgreSQL, the
	// second finds it in the catalog.
	for range 2 {
		unknown := b.do(t, http.MethodGet, "/v1/polls/nosuch/results", b.token, "", nil)
		wantProblem(t, unknown, http.StatusNotFound)
		hidden := b.do(t, http.MethodGet, "/v1/polls/secret/results", b.token, "", nil)
		sameAnswer(t, "results of a restricted poll to a principal outside its list", hidden, unknown, "nosuch", "secret")
	}

	in := b.do(t, http.MethodGet, "/v1/polls/secret/results", insiderToken, "", nil)
	if in.code != http.StatusOK || in.body["total"] != float64(1) {
		t.Fatalf("results to an eligible principal: %d %s", in.code, in.raw)
	}
	if got := in.body["results"].([]any)[1].(map[string]any); got["candidate_id"] != "y" || got["votes"] != float64(1) {
		t.Fatalf("results to an eligible principal: %s", in.raw)
	}
	// A poll open to anyone answers anyone.
	if r := b.do(t, http.MethodGet, "/v1/polls/p1/results", insiderToken, "", nil); r.code != http.StatusOK {
		t.Fatalf("results of an open poll: %d %s", r.code, r.raw)
	}
	// Without a token it is still 401, whatever the poll.
	wantProblem(t, b.do(t, http.MethodGet, "/v1/polls/secret/results", "", "", nil), http.StatusUnauthorized)
}

func TestEventStatusHidesRestrictedPolls(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	insider, insiderToken := b.principal(t, "insider")
	b.poll(t, ledger.Poll{ID: "secret", Title: "Board", Choices: []string{"x"}, Eligible: []string{insider.ID}})
	now := time.Now()
	closedAt := now.Add(-time.Hour)
	b.poll(t, ledger.Poll{ID: "closed", Title: "Old board", OpensAt: now.Add(-2 * time.Hour), ClosesAt: &closedAt,
		Choices: []string{"x"}, Eligible: []string{insider.ID}})
	ev := func(who ledger.Principal, id, poll string) ledger.Event {
		return ledger.Event{PrincipalID: who.ID, ClientEventID: id, PollID: poll, CandidateID: "x", ReceivedAt: now}
	}
	// Events that reach the ledger past intake's checks (import, a
	// catalog change while they waited in the stream).
	if _, err := b.store.Append(ctx, []ledger.Event{
		ev(insider, "i1", "secret"),
		ev(insider, "i2", "secret"), // already_responded
		ev(insider, "i3", "closed"), // poll_closed
		ev(b.who, "o1", "secret"),   // not_eligible
		ev(b.who, "o2", "closed"),   // poll_closed: checked before eligibility
		ev(b.who, "o3", "nopoll"),   // unknown_poll
		ev(b.who, "o4", "nohere"),   // unknown_poll
		{PrincipalID: b.who.ID, ClientEventID: "e1", PollID: "p1", CandidateID: "a", ReceivedAt: now}, // recorded
		ev(b.who, "e1", "secret"),    // key_reused: about the key, not the poll
		ev(insider, "io", "nowhere"), // unknown_poll
	}); err != nil {
		t.Fatal(err)
	}
	get := func(token, id string) reply {
		t.Helper()
		return b.do(t, http.MethodGet, "/v1/votes/"+id, token, "", nil)
	}

	// The outsider's own events on restricted polls read as events on
	// polls that do not exist.
	sameAnswer(t, "an outsider's not_eligible event", get(b.token, "o1"), get(b.token, "o3"), `"o3","poll_id":"nopoll"`, `"o1","poll_id":"secret"`)
	sameAnswer(t, "an outsider's event on a closed restricted poll", get(b.token, "o2"), get(b.token, "o4"), `"o4","poll_id":"nohere"`, `"o2","poll_id":"closed"`)
	if r := get(b.token, "o1"); r.str("reason") != "unknown_poll" {
		t.Fatalf("outsider's event: %s", r.raw)
	}
	if r := get(b.token, "e1"); r.code != http.StatusOK || r.str("status") != "recorded" || r.str("poll_id") != "p1" {
		t.Fatalf("outsider's recorded event: %d %s", r.code, r.raw)
	}

	// Another principal's events are indistinguishable from ids never
	// used, whatever their poll.
	for _, id := range []string{"i1", "i2", "i3", "io"} {
		sameAnswer(t, "another principal's event "+id, get(b.token, id), get(b.token, "zz"), "zz", id)
	}

	// An eligible principal sees its events as the ledger decided them.
	for id, want := range map[string]string{"i1": "", "i2": "already_responded", "i3": "poll_closed", "io": "unknown_poll"} {
		r := get(insiderToken, id)
		if r.code != http.StatusOK || r.str("reason") != want {
			t.Fatalf("insider's event %s: %d %s, want reason %q", id, r.code, r.raw, want)
		}
	}
}
