package intake_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"tally/internal/testenv"
	"tally/ledger"
)

// This file tests that idempotency comes before admission: a known event
// answers as such whatever changed since it was accepted, a replay states
// the status the ledger knows, and a principal outside a restricted poll
// learns nothing of it.

// wantAccepted checks r is a 202 for eventID with status, and that its
// body holds exactly event_id, status and status_url.
func wantAccepted(t *testing.T, r reply, eventID string, status ledger.Status) {
	t.Helper()
	if r.code != http.StatusAccepted {
		t.Fatalf("status %d, want 202: %s", r.code, r.raw)
	}
	keys := make([]string, 0, len(r.body))
	for k := range r.body {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"event_id", "status", "status_url"}) || r.str("event_id") != eventID ||
		r.str("status_url") != "/v1/votes/"+eventID {
		t.Fatalf("202 body %s, want event_id %q, status and status_url only", r.raw, eventID)
	}
	if r.str("status") != string(status) {
		t.Fatalf("202 status %q, want %q: %s", r.str("status"), status, r.raw)
	}
}

// wantKeyReused checks r is a 409 key-reused.
func wantKeyReused(t *testing.T, r reply) {
	t.Helper()
	wantProblem(t, r, http.StatusConflict)
	if r.str("type") != "urn:tally:problem:key-reused" {
		t.Fatalf("409 of type %q, want key-reused: %s", r.str("type"), r.raw)
	}
}

// record appends e1 of b's principal for p1/a to the ledger, as the
// projector would.
func (b *bundle) record(t *testing.T, eventID, poll, cand string, receivedAt time.Time) ledger.Outcome {
	t.Helper()
	out, err := b.store.Append(context.Background(), []ledger.Event{
		{PrincipalID: b.who.ID, ClientEventID: eventID, PollID: poll, CandidateID: cand, ReceivedAt: receivedAt}})
	if err != nil {
		t.Fatal(err)
	}
	return out[0]
}

// forget deletes the idempotency record of eventID, as its window's end
// would.
func (b *bundle) forget(t *testing.T, eventID string) {
	t.Helper()
	if err := b.rdb.Del(context.Background(), b.keys.Idempotency(b.who.ID, eventID)).Err(); err != nil {
		t.Fatal(err)
	}
}

// waitRefused waits until the catalog refuses a new vote for poll and cand
// with code. Each probe is a new event of another principal (a probe the
// catalog still admits is enqueued, and its id would be a known event);
// it returns the stream's length afterwards.
func (b *bundle) waitRefused(t *testing.T, what, poll, cand string, code int) int64 {
	t.Helper()
	_, prober := b.principal(t, "prober-"+poll+"-"+cand)
	i := 0
	testenv.Eventually(t, 5*time.Second, what, func() bool {
		i++
		return b.vote(t, prober, "probe"+strconv.Itoa(i), poll, cand).code == code
	})
	return b.xlen(t)
}

// TestKnownEventAfterPollClosed: a vote accepted before its poll closed,
// retried after, is answered as the known event it is (202 with the same
// payload, 409 with another) from the Redis record, then from the ledger
// once the record is gone; a new event gets the refusal.
func TestKnownEventAfterPollClosed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	receivedAt := time.Now()
	wantAccepted(t, b.vote(t, b.token, "e1", "p1", "a"), "e1", ledger.StatusPending)
	if err := b.store.ClosePoll(context.Background(), "p1", time.Now()); err != nil {
		t.Fatal(err)
	}
	enqueued := b.waitRefused(t, "the catalog sees p1 closed", "p1", "a", http.StatusUnprocessableEntity)

	wantAccepted(t, b.vote(t, b.token, "e1", "p1", "a"), "e1", ledger.StatusPending)
	wantKeyReused(t, b.vote(t, b.token, "e1", "p1", "b"))

	if out := b.record(t, "e1", "p1", "a", receivedAt); out.Status != ledger.StatusRecorded {
		t.Fatalf("ledger: %v", out)
	}
	wantAccepted(t, b.vote(t, b.token, "e1", "p1", "a"), "e1", ledger.StatusRecorded)

	// Past the Redis window the ledger knows the event.
	b.forget(t, "e1")
	wantAccepted(t, b.vote(t, b.token, "e1", "p1", "a"), "e1", ledger.StatusRecorded)
	wantKeyReused(t, b.vote(t, b.token, "e1", "p1", "b"))
	// A poll that does not exist is answered from memory, with no query:
	// 404, though the ledger knows the key.
	wantProblemType(t, b.vote(t, b.token, "e1", "nope", "a"), http.StatusNotFound, "unknown-poll")

	// An event nobody knows gets the refusal.
	r := b.vote(t, b.token, "e2", "p1", "a")
	wantProblem(t, r, http.StatusUnprocessableEntity)
	if !strings.Contains(r.str("detail"), "closed at") {
		t.Fatalf("new event on a closed poll: %s", r.raw)
	}
	if n := b.xlen(t); n != enqueued {
		t.Fatalf("stream holds %d entries, want %d", n, enqueued)
	}
}

// TestKnownEventAfterCatalogChange: a known event answers as such after its
// choice was removed and after the principal left the poll's eligibility
// (for the latter, while Redis holds its record: past it, the poll is one
// the principal may not see, answered 404 from memory as an absent one).
func TestKnownEventAfterCatalogChange(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	rdb, prefix := testenv.Redis(t)
	b := setup(t, withDB(db), withRedis(rdb, prefix))
	ctx := context.Background()
	b.poll(t, ledger.Poll{ID: "p2", Title: "Dinner", Choices: []string{"x", "y"}})
	wantAccepted(t, b.vote(t, b.token, "e1", "p1", "a"), "e1", ledger.StatusPending)
	wantAccepted(t, b.vote(t, b.token, "e2", "p2", "x"), "e2", ledger.StatusPending)
	if out := b.record(t, "e2", "p2", "x", time.Now()); out.Status != ledger.StatusRecorded {
		t.Fatalf("ledger: %v", out)
	}

	// Choice a of p1 removed.
	if _, err := db.Pool.Exec(ctx, `DELETE FROM poll_choices WHERE poll_id = 'p1' AND candidate_id = 'a'`); err != nil {
		t.Fatal(err)
	}
	b.waitRefused(t, "the catalog sees choice a gone", "p1", "a", http.StatusUnprocessableEntity)
	wantAccepted(t, b.vote(t, b.token, "e1", "p1", "a"), "e1", ledger.StatusPending)
	wantKeyReused(t, b.vote(t, b.token, "e1", "p1", "b"))

	// p2 restricted to a list the principal is not on.
	if _, err := db.Pool.Exec(ctx, `UPDATE polls SET eligibility = 'list' WHERE id = 'p2'`); err != nil {
		t.Fatal(err)
	}
	enqueued := b.waitRefused(t, "the catalog sees p2 restricted", "p2", "x", http.StatusNotFound)
	wantAccepted(t, b.vote(t, b.token, "e2", "p2", "x"), "e2", ledger.StatusRecorded)
	wantKeyReused(t, b.vote(t, b.token, "e2", "p2", "y"))
	// Past the Redis window a poll the principal may not see answers as
	// an absent one does, from memory, with no query: 404.
	b.forget(t, "e2")
	wantProblemType(t, b.vote(t, b.token, "e2", "p2", "x"), http.StatusNotFound, "unknown-poll")
	if n := b.xlen(t); n != enqueued {
		t.Fatalf("stream holds %d entries, want %d", n, enqueued)
	}
}

// TestReplayStatus: a replay states what the ledger knows of its event:
// pending before the projector got to it, then recorded or rejected as
// GET /v1/votes/{event_id} says.
func TestReplayStatus(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll(t, ledger.Poll{ID: "p2", Title: "Dinner", Choices: []string{"x"}})
	now := time.Now()
	for _, e := range []struct{ id, poll, cand string }{{"e1", "p1", "a"}, {"e2", "p1", "b"}, {"e3", "p2", "x"}} {
		wantAccepted(t, b.vote(t, b.token, e.id, e.poll, e.cand), e.id, ledger.StatusPending)
		wantAccepted(t, b.vote(t, b.token, e.id, e.poll, e.cand), e.id, ledger.StatusPending)
	}
	b.record(t, "e1", "p1", "a", now)
	if out := b.record(t, "e2", "p1", "b", now); out.Status != ledger.StatusRejected {
		t.Fatalf("second answer to p1: %v, want rejected", out)
	}
	for _, tc := range []struct {
		id, poll, cand string
		want           ledger.Status
	}{{"e1", "p1", "a", ledger.StatusRecorded}, {"e2", "p1", "b", ledger.StatusRejected}, {"e3", "p2", "x", ledger.StatusPending}} {
		wantAccepted(t, b.vote(t, b.token, tc.id, tc.poll, tc.cand), tc.id, tc.want)
		st := b.do(t, http.MethodGet, "/v1/votes/"+tc.id, b.token, "", nil)
		if st.str("status") != string(tc.want) {
			t.Fatalf("GET %s says %q, the replay %q", tc.id, st.str("status"), tc.want)
		}
	}
	// The ledger holds e3 with another payload (the Redis record expired
	// and the id came again, or an import): the ledger decides, 409.
	b.record(t, "e3", "p2", "x", now)
	b.forget(t, "e3")
	if err := b.rdb.Set(context.Background(), b.keys.Idempotency(b.who.ID, "e3"), "p1 a", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	wantKeyReused(t, b.vote(t, b.token, "e3", "p1", "a"))
	if n := b.xlen(t); n != 3 {
		t.Fatalf("stream holds %d entries, want 3", n)
	}
}

// TestNotEligibleIsUnknown: a principal outside a restricted poll's list
// gets the very answer an unknown poll gets.
func TestNotEligibleIsUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	insider, insiderToken := b.principal(t, "insider")
	b.poll(t, ledger.Poll{ID: "listed", Title: "Listed", Choices: []string{"a"}, Eligible: []string{insider.ID}})
	// Same length as "listed", so the answers may be compared byte for byte.
	unknown := b.vote(t, b.token, "e1", "nosuch", "a")
	listed := b.vote(t, b.token, "e1", "listed", "a")
	wantProblem(t, listed, http.StatusNotFound)
	if got, want := listed.raw, strings.ReplaceAll(unknown.raw, "nosuch", "listed"); got != want {
		t.Fatalf("not eligible answers\n%s\nan unknown poll\n%s", got, want)
	}
	for _, h := range []string{"Content-Type", "Cache-Control", "Retry-After", "Content-Length"} {
		if listed.header.Get(h) != unknown.header.Get(h) {
			t.Fatalf("header %s: %q for not eligible, %q for unknown", h, listed.header.Get(h), unknown.header.Get(h))
		}
	}
	wantAccepted(t, b.vote(t, insiderToken, "e1", "listed", "a"), "e1", ledger.StatusPending)
}

// TestKnownEventLedgerDown: while PostgreSQL does not answer, a replay says
// pending, and a refused vote that Redis does not know gets 503 (it may be
// known to the ledger), not the refusal.
func TestKnownEventLedgerDown(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	pool, err := pgxpool.New(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	rdb, prefix := testenv.Redis(t)
	b := setup(t, withDB(testenv.DB{Name: db.Name, URL: db.URL, Pool: pool}), withRedis(rdb, prefix))
	wantAccepted(t, b.vote(t, b.token, "e1", "p1", "a"), "e1", ledger.StatusPending)
	pool.Close()
	wantAccepted(t, b.vote(t, b.token, "e1", "p1", "a"), "e1", ledger.StatusPending)
	r := b.vote(t, b.token, "e2", "p1", "z")
	wantProblemType(t, r, http.StatusServiceUnavailable, "not-queued")
	if !strings.Contains(r.str("detail"), "same event_id") || r.header.Get("Retry-After") == "" {
		t.Fatalf("refused vote with the ledger down: %s", r.raw)
	}
	// What Redis knows still answers.
	wantKeyReused(t, b.vote(t, b.token, "e1", "p1", "z"))
}

// age makes the bundle's principal created ago before now, in its row and
// in a token issued anew, which names that creation time (the tests age a
// principal 48h, past the default 24h window).
func (b *bundle) age(t *testing.T, db testenv.DB, ago time.Duration) {
	t.Helper()
	var createdAt time.Time
	if err := db.Pool.QueryRow(context.Background(),
		`UPDATE principals SET created_at = now() - make_interval(secs => $2) WHERE id = $1 RETURNING created_at`,
		b.who.ID, ago.Seconds()).Scan(&createdAt); err != nil {
		t.Fatal(err)
	}
	token, err := b.key.Issue(b.who.ID, createdAt, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	b.who.CreatedAt, b.token = createdAt, token
}

// ledgerChecks is the ledger check counter of outcome.
func (b *bundle) ledgerChecks(outcome string) int {
	return count(b.m.LedgerChecks.WithLabelValues(outcome))
}

// wantLedgerChecks checks the ledger check counters, by outcome.
func (b *bundle) wantLedgerChecks(t *testing.T, newIDs, replays, conflicts, errs int) {
	t.Helper()
	got := [4]int{b.ledgerChecks("new"), b.ledgerChecks("replay"), b.ledgerChecks("conflict"), b.ledgerChecks("error")}
	if want := [4]int{newIDs, replays, conflicts, errs}; got != want {
		t.Fatalf("ledger checks new, replay, conflict, error: %v, want %v", got, want)
	}
}

// withLedgerCheck turns Config.LedgerCheck on.
func withLedgerCheck(c *config) { c.LedgerCheck = true }

// TestPastWindowLedgerSettles: without Config.LedgerCheck, the vote of a
// principal older than the idempotency window costs no ledger lookup: a
// retry whose record expired and a key reused with another payload are
// both answered 202 and enqueued, and the ledger settles them: the retry
// is a duplicate and the reuse is rejected key_reused, neither counted.
func TestPastWindowLedgerSettles(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	rdb, prefix := testenv.Redis(t)
	b := setup(t, withDB(db), withRedis(rdb, prefix))
	runProjector(t, b)
	b.age(t, db, 48*time.Hour)
	if out := b.record(t, "e1", "p1", "a", time.Now()); out.Status != ledger.StatusRecorded {
		t.Fatalf("ledger: %v", out)
	}
	wantAccepted(t, b.vote(t, b.token, "e1", "p1", "a"), "e1", ledger.StatusPending)
	b.forget(t, "e1") // the retry's record expires too
	wantAccepted(t, b.vote(t, b.token, "e1", "p1", "b"), "e1", ledger.StatusPending)
	b.wantLedgerChecks(t, 0, 0, 0, 0)
	ctx := context.Background()
	testenv.Eventually(t, 10*time.Second, "both entries applied", func() bool { return b.xlen(t) == 0 })
	res, err := b.store.Results(ctx, "p1")
	if err != nil {
		t.Fatal(err)
	}
	if res.Total != 1 || len(res.Results) == 0 || res.Results[0] != (ledger.CandidateVotes{CandidateID: "a", Votes: 1}) {
		t.Fatalf("p1 counts %+v, want the one original vote for a", res)
	}
	var rejected string
	if err := db.Pool.QueryRow(ctx, `SELECT reason FROM poll_event_rejections WHERE principal_id = $1 AND client_event_id = 'e1'`,
		b.who.ID).Scan(&rejected); err != nil || rejected != "key_reused" {
		t.Fatalf("the reused key's rejection: %q %v, want key_reused", rejected, err)
	}
	if r := b.status(t, b.token, "e1"); r.code != http.StatusOK || r.str("status") != "recorded" || r.str("candidate_id") != "a" {
		t.Fatalf("status of e1: %d %s, want the original's outcome, recorded for a", r.code, r.raw)
	}
}

// TestExpiredRecordLedgerDecides: with Config.LedgerCheck, the record of an event of a principal
// older than the idempotency window has expired; intake asks the ledger:
// the same payload answers 202 with the ledger's status and enqueues
// nothing, another payload answers 409, and a new event id is enqueued.
func TestExpiredRecordLedgerDecides(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	rdb, prefix := testenv.Redis(t)
	b := setup(t, withDB(db), withRedis(rdb, prefix), withLedgerCheck)
	b.poll(t, ledger.Poll{ID: "p2", Title: "Dinner", Choices: []string{"x"}})
	b.age(t, db, 48*time.Hour)
	// e1 is in the ledger and Redis has no record of it, as once its
	// window ended.
	if out := b.record(t, "e1", "p1", "a", time.Now()); out.Status != ledger.StatusRecorded {
		t.Fatalf("ledger: %v", out)
	}

	wantAccepted(t, b.vote(t, b.token, "e1", "p1", "a"), "e1", ledger.StatusRecorded)
	wantKeyReused(t, b.vote(t, b.token, "e1", "p1", "b"))
	wantKeyReused(t, b.vote(t, b.token, "e1", "p2", "x"))
	if n := b.xlen(t); n != 0 {
		t.Fatalf("stream holds %d entries after a replay and two conflicts, want 0", n)
	}
	b.wantLedgerChecks(t, 0, 1, 2, 0)

	// A new event id is enqueued; its retry is a replay of its record.
	// The principal is older than the window, so each vote asks the ledger
	// first: it does not hold e2 yet, and the record answers.
	wantAccepted(t, b.vote(t, b.token, "e2", "p2", "x"), "e2", ledger.StatusPending)
	wantAccepted(t, b.vote(t, b.token, "e2", "p2", "x"), "e2", ledger.StatusPending)
	wantKeyReused(t, b.vote(t, b.token, "e2", "p1", "a"))
	if n := b.xlen(t); n != 1 {
		t.Fatalf("stream holds %d entries, want 1", n)
	}
	b.wantLedgerChecks(t, 3, 1, 2, 0)
	if got := count(b.m.Replays); got != 2 {
		t.Fatalf("replays counted %d, want 2 (one from the ledger, one from the record)", got)
	}
}

// TestYoungPrincipalNotChecked: a principal created since the shard's
// epoch, within the window, has every record: its new votes never reach
// the ledger. Once the epoch is lost (Redis lost its data), its next new
// vote is checked, and enqueued.
func TestYoungPrincipalNotChecked(t *testing.T) {
	t.Parallel()
	b := setup(t, withLedgerCheck)
	b.poll(t, ledger.Poll{ID: "p2", Title: "Dinner", Choices: []string{"x"}})
	// An epoch an hour back: a signed token's creation time is a whole
	// second, which may fall before an epoch set this second.
	establishedEpoch(t, b.rdb, b.keys)
	wantAccepted(t, b.vote(t, b.token, "e0", "p1", "a"), "e0", ledger.StatusPending)
	before := [4]int{b.ledgerChecks("new"), b.ledgerChecks("replay"), b.ledgerChecks("conflict"), b.ledgerChecks("error")}
	_, young := b.principal(t, "young")
	wantAccepted(t, b.vote(t, young, "e1", "p1", "a"), "e1", ledger.StatusPending)
	wantAccepted(t, b.vote(t, young, "e1", "p1", "a"), "e1", ledger.StatusPending)
	wantKeyReused(t, b.vote(t, young, "e1", "p1", "b"))
	b.wantLedgerChecks(t, before[0], before[1], before[2], before[3])

	if err := b.rdb.Del(context.Background(), b.keys.Epoch(0)).Err(); err != nil {
		t.Fatal(err)
	}
	wantAccepted(t, b.vote(t, young, "e2", "p2", "x"), "e2", ledger.StatusPending)
	b.wantLedgerChecks(t, before[0]+1, before[1], before[2], before[3])
	if n := b.xlen(t); n != 3 {
		t.Fatalf("stream holds %d entries, want 3", n)
	}
	// The epoch is set again: a principal created after it is not checked.
	// A signed token names whole seconds, so it is created in the next
	// second: one created in the epoch's second may be checked.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	_, newer := b.principal(t, "newer")
	wantAccepted(t, b.vote(t, newer, "e1", "p1", "a"), "e1", ledger.StatusPending)
	b.wantLedgerChecks(t, before[0]+1, before[1], before[2], before[3])
}

// TestLedgerCheckLedgerDown: while PostgreSQL does not answer, the new
// vote of a principal older than the window is enqueued all the same (the
// ledger decides it when it is back); the check counts an error.
func TestLedgerCheckLedgerDown(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	pool, err := pgxpool.New(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	rdb, prefix := testenv.Redis(t)
	b := setup(t, withDB(testenv.DB{Name: db.Name, URL: db.URL, Pool: pool}), withRedis(rdb, prefix), withLedgerCheck)
	b.age(t, db, 48*time.Hour)
	wantAccepted(t, b.vote(t, b.token, "e1", "p1", "a"), "e1", ledger.StatusPending)
	b.wantLedgerChecks(t, 1, 0, 0, 0)
	pool.Close()
	wantAccepted(t, b.vote(t, b.token, "e2", "p1", "b"), "e2", ledger.StatusPending)
	b.wantLedgerChecks(t, 1, 0, 0, 1)
	if n := b.xlen(t); n != 2 {
		t.Fatalf("stream holds %d entries, want 2", n)
	}
}
