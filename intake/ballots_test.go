package intake_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"tally/internal/testenv"
	"tally/ledger"
	"tally/stream"
	"tally/vote"
)

// This file tests ballots of every kind on the vote path: the body that
// carries them, their check against their poll (400 for a shape, 422
// invalid-ballot for a rule), the canonical form the stream entry carries
// and the fingerprint binds (a retry spelled otherwise is a retry), and
// how GET /v1/votes/{event_id} shows them.

// ballotPoll creates poll id of the ballot spec with choices a, b, c, d
// and waits until intake holds it.
func (b *bundle) ballotPoll(t testing.TB, id string, spec vote.Spec) {
	t.Helper()
	choices := []string{"a", "b", "c", "d"}
	rules, err := vote.NewRules(spec, len(choices))
	if err != nil {
		t.Fatal(err)
	}
	b.poll(t, ledger.Poll{ID: id, Title: "Ballot " + id, Choices: choices, Rules: rules})
}

func ballotBody(eventID, poll, ballot string) []byte {
	return fmt.Appendf(nil, `{"event_id":%q,"poll_id":%q,"ballot":%s}`, eventID, poll, ballot)
}

func (b *bundle) voteBallot(t *testing.T, eventID, poll, ballot string) reply {
	t.Helper()
	return b.do(t, http.MethodPost, "/v1/votes", b.token, "application/json", ballotBody(eventID, poll, ballot))
}

// lastEntry is the last entry of the bundle's stream, decoded.
func (b *bundle) lastEntry(t *testing.T) stream.Entry {
	t.Helper()
	msgs, err := b.rdb.XRevRangeN(context.Background(), b.keys.Stream(0), "+", "-", 1).Result()
	if err != nil || len(msgs) == 0 {
		t.Fatalf("no stream entry (%v)", err)
	}
	e, err := stream.Decode(msgs[0].Values)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func intp(n int) *int { return &n }

// waitClosed waits until intake's catalog refuses ballot on poll as closed,
// probing with new events of another principal.
func (b *bundle) waitClosed(t *testing.T, poll, ballot string) {
	t.Helper()
	_, prober := b.principal(t, "prober-"+poll)
	i := 0
	testenv.Eventually(t, 5*time.Second, "the catalog sees "+poll+" closed", func() bool {
		i++
		r := b.do(t, http.MethodPost, "/v1/votes", prober, "application/json", ballotBody(fmt.Sprint("probe", i), poll, ballot))
		return r.str("type") == "urn:tally:problem:poll-closed"
	})
}

// ballotPolls are a poll of each kind but single, with rules tight enough
// for each to be broken.
var ballotPolls = []struct {
	id   string
	spec vote.Spec
}{
	{"multi", vote.Spec{Kind: "multiple", MinChoices: intp(1), MaxChoices: intp(2)}},
	{"appr", vote.Spec{Kind: "approve"}},
	{"scor", vote.Spec{Kind: "score", MaxScore: intp(5), Budget: intp(8)}},
	{"rank", vote.Spec{Kind: "ranked"}},
}

func setupBallots(t *testing.T) *bundle {
	t.Helper()
	b := setup(t)
	for _, p := range ballotPolls {
		b.ballotPoll(t, p.id, p.spec)
	}
	return b
}

// TestBallotAccepted: a valid ballot of each kind answers 202, and its
// stream entry carries the canonical form, its fingerprint over it; the
// status reads pending with the ballot as a JSON value.
func TestBallotAccepted(t *testing.T) {
	t.Parallel()
	b := setupBallots(t)
	cases := []struct{ poll, ballot, canonical string }{
		{"multi", `["c", "a"]`, `["a","c"]`},
		{"multi", `["b"]`, `["b"]`},
		{"appr", `{"b":"no", "a":"yes","d":"abstain"}`, `{"a":"yes","b":"no","d":"abstain"}`},
		{"appr", `{}`, `{}`},
		{"scor", `{"c":3,"a":5}`, `{"a":5,"c":3}`},
		{"scor", `{"a":0}`, `{"a":0}`},
		{"rank", `["c","a","b"]`, `["c","a","b"]`},
		{"rank", `["d"]`, `["d"]`},
		{"p1", `"b"`, `b`},
	}
	for i, tc := range cases {
		id := fmt.Sprintf("e%d", i)
		r := b.voteBallot(t, id, tc.poll, tc.ballot)
		if r.code != http.StatusAccepted {
			t.Fatalf("%s %s: %d, want 202: %s", tc.poll, tc.ballot, r.code, r.raw)
		}
		e := b.lastEntry(t)
		if e.Answer() != tc.canonical || e.ClientEventID != id || e.PollID != tc.poll {
			t.Fatalf("%s %s: stream entry %+v, want the canonical ballot %s", tc.poll, tc.ballot, e, tc.canonical)
		}
		if rec, err := b.rdb.Get(t.Context(), b.keys.Idempotency(b.who.ID, id)).Result(); err != nil || rec != stream.Record(tc.poll, tc.canonical) {
			t.Fatalf("%s %s: idempotency record %q (%v), want %q (over the canonical form)", tc.poll, tc.ballot, rec, err, stream.Record(tc.poll, tc.canonical))
		}
		st := b.status(t, b.token, id)
		if st.code != http.StatusOK || st.str("status") != "pending" {
			t.Fatalf("status of %s: %d %s", id, st.code, st.raw)
		}
		if tc.poll == "p1" {
			if st.str("candidate_id") != tc.canonical || st.body["ballot"] != nil {
				t.Fatalf("status of a single choice %s: %s, want candidate_id %s", id, st.raw, tc.canonical)
			}
			continue
		}
		if _, has := st.body["candidate_id"]; has || !strings.Contains(st.raw, `"ballot":`+tc.canonical) {
			t.Fatalf("status of %s: %s, want \"ballot\":%s and no candidate_id", id, st.raw, tc.canonical)
		}
	}
}

// TestBallotRefused: each rule broken answers 422 invalid-ballot (an
// unknown choice invalid-choice) naming it, each wrong shape 400; nothing
// is enqueued.
func TestBallotRefused(t *testing.T) {
	t.Parallel()
	b := setupBallots(t)
	cases := []struct {
		name, poll, ballot string
		code               int
		slug, detail       string
	}{
		{"too many", "multi", `["a","b","c"]`, 422, "invalid-ballot", "takes at most 2"},
		{"too few", "multi", `[]`, 422, "invalid-ballot", "takes at least 1"},
		{"twice", "multi", `["a","a"]`, 422, "invalid-ballot", `choice "a" is given twice`},
		{"twice ranked", "rank", `["b","a","b"]`, 422, "invalid-ballot", `choice "b" is given twice`},
		{"unknown choice", "multi", `["z"]`, 422, "invalid-choice", `choice "z" is not one of the poll's choices`},
		{"unknown choice approve", "appr", `{"z":"yes"}`, 422, "invalid-choice", `"z"`},
		{"over max_score", "scor", `{"a":6}`, 422, "invalid-ballot", "max_score is 5"},
		{"over budget", "scor", `{"a":5,"b":4}`, 422, "invalid-ballot", "budget is 8"},
		{"empty ranked", "rank", `[]`, 422, "invalid-ballot", "ranks no choice"},
		{"candidate on multiple", "multi", "", 422, "invalid-ballot", `takes a ballot of its kind instead of candidate_id: send "ballot": an array of choice ids`},
		{"object for multiple", "multi", `{"a":"yes"}`, 400, "invalid-request", "a multiple ballot is an array"},
		{"string for ranked", "rank", `"a"`, 400, "invalid-request", "a ranked ballot is an array"},
		{"array for approve", "appr", `["a"]`, 400, "invalid-request", "approve ballot is an object"},
		{"bad mark", "appr", `{"a":"maybe"}`, 400, "invalid-request", `"yes", "no" or "abstain"`},
		{"mark twice", "appr", `{"a":"yes","a":"no"}`, 400, "invalid-request", `marks choice "a" twice`},
		{"score not a number", "scor", `{"a":"3"}`, 400, "invalid-request", "a score is a whole number"},
		{"score fraction", "scor", `{"a":1.5}`, 400, "invalid-request", "whole number"},
		{"score negative", "scor", `{"a":-1}`, 400, "invalid-request", "0 or more"},
		{"number ids", "multi", `[1]`, 400, "invalid-request", "where a choice id goes"},
		{"bad id", "rank", `["a b"]`, 400, "invalid-request", "is not an id"},
		{"array for single", "p1", `["a"]`, 400, "invalid-request", "holds an array where a choice id goes"},
		{"unknown single", "p1", `"z"`, 422, "invalid-choice", `"z" is not a choice`},
	}
	for i, tc := range cases {
		body := ballotBody(fmt.Sprintf("e%d", i), tc.poll, tc.ballot)
		if tc.ballot == "" {
			body = voteBody(fmt.Sprintf("e%d", i), tc.poll, "a")
		}
		r := b.do(t, http.MethodPost, "/v1/votes", b.token, "application/json", body)
		if r.code != tc.code {
			t.Errorf("%s: %d, want %d: %s", tc.name, r.code, tc.code, r.raw)
			continue
		}
		wantProblemType(t, r, tc.code, tc.slug)
		if !strings.Contains(r.str("detail"), tc.detail) {
			t.Errorf("%s: detail %q, want it to contain %q", tc.name, r.str("detail"), tc.detail)
		}
	}
	if n := b.xlen(t); n != 0 {
		t.Fatalf("%d entries enqueued by refused ballots", n)
	}
}

// TestBallotBody: the vote body takes exactly one of candidate_id and
// ballot, and refuses a ballot on a poll the principal may not see as an
// unknown poll, whatever its shape.
func TestBallotBody(t *testing.T) {
	t.Parallel()
	b := setupBallots(t)
	insider, _ := b.principal(t, "insider")
	rules, _ := vote.NewRules(vote.Spec{Kind: "ranked"}, 2)
	b.poll(t, ledger.Poll{ID: "hidden", Title: "Hidden", Choices: []string{"a", "b"}, Rules: rules, Eligible: []string{insider.ID}})
	cases := []struct {
		name, body string
		code       int
		detail     string
	}{
		{"both", `{"event_id":"e","poll_id":"multi","candidate_id":"a","ballot":["a"]}`, 400, `both "candidate_id" and "ballot"`},
		{"neither", `{"event_id":"e","poll_id":"multi"}`, 400, `"candidate_id" (or "ballot") is missing`},
		{"ballot twice", `{"event_id":"e","poll_id":"multi","ballot":["a"],"ballot":["b"]}`, 400, `"ballot" appears more than once`},
		{"Ballot", `{"event_id":"e","poll_id":"multi","Ballot":["a"]}`, 400, `the key "Ballot" is not allowed`},
		{"broken JSON", `{"event_id":"e","poll_id":"multi","ballot":["a",]}`, 400, "not valid JSON"},
		{"trailing", `{"event_id":"e","poll_id":"multi","ballot":["a"]}]`, 400, "after the JSON object"},
		{"hidden, wrong shape", `{"event_id":"e","poll_id":"hidden","ballot":{}}`, 404, `no poll "hidden"`},
		{"unknown poll", `{"event_id":"e","poll_id":"nope","ballot":["a"]}`, 404, `no poll "nope"`},
	}
	for _, tc := range cases {
		r := b.do(t, http.MethodPost, "/v1/votes", b.token, "application/json", []byte(tc.body))
		if r.code != tc.code {
			t.Errorf("%s: %d, want %d: %s", tc.name, r.code, tc.code, r.raw)
			continue
		}
		wantProblem(t, r, tc.code)
		if !strings.Contains(r.str("detail"), tc.detail) {
			t.Errorf("%s: detail %q, want it to contain %q", tc.name, r.str("detail"), tc.detail)
		}
	}
	if n := b.xlen(t); n != 0 {
		t.Fatalf("%d entries enqueued by refused bodies", n)
	}
}

// TestBallotRetry: a retry spelling the same ballot otherwise (keys
// reordered, another order of a set, candidate_id for ballot on a single
// choice) is a retry, 202 with nothing enqueued; another ballot under the
// same event id is 409; a ranking in another order is another ballot.
func TestBallotRetry(t *testing.T) {
	t.Parallel()
	b := setupBallots(t)
	steps := []struct {
		poll, ballot string // ballot "" sends candidate_id "a"
		event        string
		code         int
		enqueued     bool
	}{
		{"appr", `{"a":"yes","b":"no"}`, "e1", 202, true},
		{"appr", `{"b":"no","a":"yes"}`, "e1", 202, false},
		{"appr", ` { "b" : "no" , "a" : "yes" } `, "e1", 202, false},
		{"appr", `{"a":"yes","b":"abstain"}`, "e1", 409, false},
		{"multi", `["a","c"]`, "e2", 202, true},
		{"multi", `["c","a"]`, "e2", 202, false},
		{"multi", `["c"]`, "e2", 409, false},
		{"scor", `{"a":1,"b":2}`, "e3", 202, true},
		{"scor", `{"b":2,"a":1}`, "e3", 202, false},
		{"scor", `{"b":2,"a":2}`, "e3", 409, false},
		{"rank", `["a","b"]`, "e4", 202, true},
		{"rank", `["b","a"]`, "e4", 409, false},
		{"p1", `"a"`, "e5", 202, true},
		{"p1", "", "e5", 202, false},
		{"p1", "", "e6", 202, true},
		{"p1", `"a"`, "e6", 202, false},
		{"p1", `"b"`, "e6", 409, false},
		{"multi", `["a","c"]`, "e6", 409, false},
	}
	for i, st := range steps {
		before := b.xlen(t)
		var r reply
		if st.ballot == "" {
			r = b.vote(t, b.token, st.event, st.poll, "a")
		} else {
			r = b.voteBallot(t, st.event, st.poll, st.ballot)
		}
		if r.code != st.code {
			t.Fatalf("step %d (%s %s %s): %d, want %d: %s", i, st.event, st.poll, st.ballot, r.code, st.code, r.raw)
		}
		if st.code == 409 {
			wantProblemType(t, r, 409, "key-reused")
		}
		if got := b.xlen(t) - before; got != map[bool]int64{true: 1}[st.enqueued] {
			t.Fatalf("step %d (%s %s %s): %d entries enqueued", i, st.event, st.poll, st.ballot, got)
		}
	}
}

// TestBallotKnownAfterClose: idempotency comes before admission for
// ballots too: a retry of a ballot accepted before its poll closed
// answers 202, in another spelling too, and another ballot 409.
func TestBallotKnownAfterClose(t *testing.T) {
	t.Parallel()
	b := setupBallots(t)
	if r := b.voteBallot(t, "e1", "multi", `["b","a"]`); r.code != http.StatusAccepted {
		t.Fatalf("%d: %s", r.code, r.raw)
	}
	if err := b.store.ClosePoll(context.Background(), "multi", time.Now()); err != nil {
		t.Fatal(err)
	}
	b.waitClosed(t, "multi", `["a"]`)
	if r := b.voteBallot(t, "e1", "multi", `["a","b"]`); r.code != http.StatusAccepted {
		t.Fatalf("retry after close: %d: %s", r.code, r.raw)
	}
	if r := b.voteBallot(t, "e1", "multi", `["a"]`); r.code != http.StatusConflict {
		t.Fatalf("another ballot after close: %d: %s", r.code, r.raw)
	}
	if r := b.voteBallot(t, "e2", "multi", `["a"]`); r.code != http.StatusUnprocessableEntity {
		t.Fatalf("a new ballot after close: %d: %s", r.code, r.raw)
	}
}

// TestBallotRecordedStatus: the ledger's record of a ballot shows it as a
// JSON value; its retry is known to the ledger in any spelling once the
// Redis record is gone.
func TestBallotRecordedStatus(t *testing.T) {
	t.Parallel()
	b := setupBallots(t)
	out, err := b.store.Append(context.Background(), []ledger.Event{{PrincipalID: b.who.ID, ClientEventID: "e1",
		PollID: "scor", Ballot: `{"a":2,"c":1}`, ReceivedAt: time.Now()}})
	if err != nil || out[0].Status != ledger.StatusRecorded {
		t.Fatalf("append: %v %v", out, err)
	}
	st := b.status(t, b.token, "e1")
	if st.code != http.StatusOK || st.str("status") != "recorded" || !strings.Contains(st.raw, `"ballot":{"a":2,"c":1}`) {
		t.Fatalf("status: %d %s", st.code, st.raw)
	}
	if err := b.store.ClosePoll(context.Background(), "scor", time.Now()); err != nil {
		t.Fatal(err)
	}
	b.waitClosed(t, "scor", `{}`)
	if r := b.voteBallot(t, "e1", "scor", `{"c":1,"a":2}`); r.code != http.StatusAccepted || r.str("status") != "recorded" {
		t.Fatalf("retry known to the ledger: %d %s", r.code, r.raw)
	}
	if r := b.voteBallot(t, "e1", "scor", `{"c":1}`); r.code != http.StatusConflict {
		t.Fatalf("another ballot known to the ledger: %d %s", r.code, r.raw)
	}
}

// TestBallotResults: the results of a poll of each kind carry its kind,
// its ballots and the figures of its kind (the contract checks their
// shape: a ranked poll's pairwise matrix and Condorcet winner, null with
// no ballot, and no such field for the other kinds).
func TestBallotResults(t *testing.T) {
	t.Parallel()
	b := setupBallots(t)
	want := map[string][]string{
		"multi": {`"kind":"multiple"`, `"ballots":0`, `{"candidate_id":"a","votes":0}`},
		"appr":  {`"kind":"approve"`, `{"candidate_id":"a","votes":0,"yes":0,"no":0,"abstain":0}`},
		"scor":  {`"kind":"score"`, `{"candidate_id":"a","votes":0,"score":0}`},
		"rank":  {`"kind":"ranked"`, `{"candidate_id":"a","votes":0,"borda":0}`, `"pairwise":{"a":{"b":0,"c":0,"d":0}`, `"condorcet_winner":null`},
		"p1":    {`"kind":"single"`, `{"candidate_id":"a","votes":0}`},
	}
	for poll, parts := range want {
		r := b.results(t, b.token, poll)
		if r.code != http.StatusOK {
			t.Fatalf("results of %s: %d %s", poll, r.code, r.raw)
		}
		for _, p := range parts {
			if !strings.Contains(r.raw, p) {
				t.Errorf("results of %s: %s, want it to contain %s", poll, r.raw, p)
			}
		}
	}
}
