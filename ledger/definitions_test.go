package ledger_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"tally/audit"
	"tally/ledger"
)

// definitions reads a poll's definition leaves from its export, by leaf.
func definitions(t *testing.T, b bundle, poll string) map[int64]audit.Definition {
	t.Helper()
	out := map[int64]audit.Definition{}
	err := b.store.Export(b.ctx, poll, func(r ledger.LedgerRow) error {
		if r.Definition != nil {
			out[r.LeafIndex] = *r.Definition
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A poll's log starts with its definition; a close that moves its closing
// time appends the definition again, and one that does not, nothing.
func TestDefinitionLeaves(t *testing.T) {
	t.Parallel()
	b := setup(t)
	opens := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	err := b.store.CreatePoll(b.ctx, ledger.Poll{ID: "p", Title: "Lunch?", OpensAt: opens, Choices: []string{"b", "a"}, Eligible: []string{"u2", "u1"}})
	if err != nil {
		t.Fatal(err)
	}
	defs := definitions(t, b, "p")
	d, ok := defs[0]
	wantHash := audit.EligibleListHash([]string{"u1", "u2"})
	if len(defs) != 1 || !ok || d.Title != "Lunch?" || !d.OpensAt.Equal(opens) || d.ClosesAt != nil ||
		strings.Join(d.Choices, ",") != "b,a" || d.EligibleHash == nil || *d.EligibleHash != wantHash {
		t.Fatalf("definitions after create: %+v, want the poll's at leaf 0", defs)
	}
	if _, err := b.store.Append(b.ctx, []ledger.Event{ev("u1", "k", "p", "a")}); err != nil {
		t.Fatal(err)
	}
	closes := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	for range 2 { // the second close changes nothing
		if err := b.store.ClosePoll(b.ctx, "p", closes); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.store.ClosePoll(b.ctx, "p", closes.Add(time.Hour)); err != nil { // later: kept
		t.Fatal(err)
	}
	defs = definitions(t, b, "p")
	if c, ok := defs[2]; len(defs) != 2 || !ok || c.ClosesAt == nil || !c.ClosesAt.Equal(closes) || func() bool { _, why := c.Follows(d); return why != "" }() {
		t.Fatalf("definitions after the closes: %+v, want a second at leaf 2 closing at %s", defs, closes)
	}
	rep := checkInvariants(t, b)
	if c := rep.Logs[0]; c.Size != 3 || c.Definitions != 2 || c.Rows != 1 {
		t.Fatalf("log check %+v, want 3 leaves: 2 definitions and a row", c)
	}
	checkRootsMatchExport(t, b, "p")
}

// What the owner can do to the catalog behind the log's back (a choice
// added, a closed poll reopened) lets votes into the ledger that the
// definition in force refuses; rebuild names the first.
func TestRebuildFindsVotesTheDefinitionRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, sql, cand, want string
	}{
		{"a choice added", `INSERT INTO poll_choices (poll_id, candidate_id, position) VALUES ('p', 'c', 3)`, "c",
			"which the poll's definition in force does not offer"},
		{"a poll reopened", `UPDATE polls SET closes_at = NULL WHERE id = 'p'`, "a", "once the poll had closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.poll(t, "p", "a", "b")
			b.poll(t, "q", "a")
			if _, err := b.store.Append(b.ctx, []ledger.Event{ev("u1", "k", "p", "a"), ev("u1", "k2", "q", "a")}); err != nil {
				t.Fatal(err)
			}
			if tc.name == "a poll reopened" {
				if err := b.store.ClosePoll(b.ctx, "p", time.Now()); err != nil {
					t.Fatal(err)
				}
			}
			tamper(t, b, tc.sql)
			outs, err := b.store.Append(b.ctx, []ledger.Event{ev("u2", "k", "p", tc.cand)})
			if err != nil || outs[0].Status != ledger.StatusRecorded {
				t.Fatalf("the vote the tampered catalog lets in: %v (%v)", outs, err)
			}
			rep, err := b.store.Rebuild(b.ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			if rep.LogProblems != 1 {
				t.Fatalf("%d log problems, want 1: %+v", rep.LogProblems, rep.Logs)
			}
			for _, c := range rep.Logs {
				switch {
				case c.PollID == "q" && !c.OK():
					t.Errorf("untouched poll q reported: %+v", c)
				case c.PollID == "p" && (c.Leaf != c.Size-1 || !strings.Contains(c.Problem, tc.want)):
					t.Errorf("poll p: leaf %d %q, want leaf %d and %q", c.Leaf, c.Problem, c.Size-1, tc.want)
				}
			}
		})
	}
}

// Closes race appends of votes received on both sides of the closing
// time: every vote recorded after a close's leaf was received before the
// closing it logs (rebuild checks each against the definition in force),
// and each vote is recorded or rejected poll_closed by its time.
func TestCloseRacesAppends(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll(t, "p", "a", "b")
	start := time.Now()
	const appenders, batches, size = 4, 30, 20
	closes := make([]time.Time, 10) // each earlier than the one before
	for i := range closes {
		closes[i] = start.Add(time.Duration(len(closes)-i) * 20 * time.Millisecond)
	}
	var wg sync.WaitGroup
	errs := make(chan error, appenders+1)
	for w := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range batches {
				batch := make([]ledger.Event, size)
				for j := range batch {
					batch[j] = ev(fmt.Sprintf("w%d-%d-%d", w, i, j), "k", "p", "a")
					// Times spread over the closing times to come.
					batch[j].ReceivedAt = start.Add(time.Duration((i*size+j)%220) * time.Millisecond)
				}
				if _, err := b.store.Append(b.ctx, batch); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, at := range closes {
			if err := b.store.ClosePoll(b.ctx, "p", at); err != nil {
				errs <- err
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	rep := checkInvariants(t, b)
	if c := rep.Logs[0]; c.Definitions != int64(1+len(closes)) {
		t.Fatalf("log check %+v, want %d definitions", c, 1+len(closes))
	}
}

// A database from before definitions were logged (migration 10), with
// polls, votes and a signed checkpoint, migrates up and still rebuilds
// and verifies: its logs are votes only, which the audit counts as votes
// no definition covers. A close from then on logs the poll's definition
// after them, and the checkpoint signed before still holds.
func TestMigrationKeepsLogsFromBeforeDefinitions(t *testing.T) {
	t.Parallel()
	db, _, p := migratedTo(t, 10)
	ctx := context.Background()
	// Polls as tally poll create made them at migration 10: no definition.
	if _, err := db.Pool.Exec(ctx, `
INSERT INTO polls (id, title, opens_at) VALUES ('old', 'An old poll', '2020-01-01T00:00:00Z');
INSERT INTO poll_choices (poll_id, candidate_id, position) VALUES ('old', 'a', 1), ('old', 'b', 2);
INSERT INTO poll_results (poll_id, candidate_id, vote_count) VALUES ('old', 'a', 0), ('old', 'b', 0);
-- The columns of migration 00013 that today's append reads, for the
-- appends made here, at migration 10; dropped before migrating up.
ALTER TABLE polls ADD COLUMN ballot_kind text NOT NULL DEFAULT 'single', ADD COLUMN min_choices int,
    ADD COLUMN max_choices int, ADD COLUMN max_score int, ADD COLUMN budget int, ADD COLUMN answers text NOT NULL DEFAULT 'final';
ALTER TABLE poll_events ADD COLUMN ballot text, ADD COLUMN latest bool NOT NULL DEFAULT false;
-- And the rule of migration 00018 that today's append asks.
CREATE FUNCTION poll_open_at(opens_at timestamptz, closes_at timestamptz, t timestamptz) RETURNS boolean
    LANGUAGE sql IMMUTABLE RETURN opens_at <= t AND (closes_at IS NULL OR t < closes_at);`); err != nil {
		t.Fatal(err)
	}
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b := bundle{db: db, store: store, ctx: ctx}
	var batch []ledger.Event
	for i := range 40 {
		batch = append(batch, ev(fmt.Sprintf("u%d", i), "k", "old", []string{"a", "b"}[i%3%2]))
	}
	if _, err := store.Append(ctx, batch); err != nil {
		t.Fatalf("append at migration 10: %v", err)
	}
	head, err := store.Head(ctx, "old")
	if err != nil || head.Size != 40 {
		t.Fatalf("head at migration 10: %+v (%v), want 40 votes", head, err)
	}
	signHead(t, b, head)

	if _, err := db.Pool.Exec(ctx, `ALTER TABLE polls DROP COLUMN ballot_kind, DROP COLUMN min_choices, DROP COLUMN max_choices,
    DROP COLUMN max_score, DROP COLUMN budget, DROP COLUMN answers;
ALTER TABLE poll_events DROP COLUMN ballot, DROP COLUMN latest;
DROP FUNCTION poll_open_at`); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	audited := func(wantLeaves, wantDefs int64) {
		t.Helper()
		rep := checkInvariants(t, b)
		if c := rep.Logs[0]; c.Size != wantLeaves || c.Definitions != wantDefs || c.Rows != 40 {
			t.Fatalf("log check %+v, want %d leaves, %d definitions and 40 rows", c, wantLeaves, wantDefs)
		}
		var export bytes.Buffer
		var cps []audit.StoredCheckpoint
		err := store.Export(ctx, "", func(r ledger.LedgerRow) error {
			_, err := export.Write(audit.AppendExportLine(nil, r.ExportRow()))
			return err
		})
		if err == nil {
			err = store.Checkpoints(ctx, "", func(c ledger.Checkpoint) error { cps = append(cps, c.Stored()); return nil })
		}
		if err != nil {
			t.Fatal(err)
		}
		_, vkey := testKey(t)
		verifier, err := audit.NewVerifier(vkey)
		if err != nil {
			t.Fatal(err)
		}
		rep2, err := audit.Verify(&export, audit.Inputs{Checkpoints: cps, Verifiers: []note.Verifier{verifier}, BeforeDefinitions: []string{"old"}})
		if err != nil || !rep2.OK() || rep2.Definitions != wantDefs || rep2.VotesWithoutDefinition() != 40 || rep2.Polls[0].CheckpointsVerified != len(cps) {
			t.Fatalf("audit of the export: %+v (%v), want OK with %d definitions and the 40 votes without one", rep2, err, wantDefs)
		}
	}
	audited(40, 0)
	if err := store.ClosePoll(ctx, "old", time.Now()); err != nil {
		t.Fatal(err)
	}
	if d, ok := definitions(t, b, "old")[40]; !ok || d.ClosesAt == nil || strings.Join(d.Choices, ",") != "a,b" {
		t.Fatalf("definitions after the close: %+v, want the poll's at leaf 40", definitions(t, b, "old"))
	}
	outs, err := store.Append(ctx, []ledger.Event{ev("late", "k", "old", "a")})
	if err != nil || outs[0].Reason != ledger.ReasonPollClosed {
		t.Fatalf("a vote after the close: %v (%v), want poll_closed", outs, err)
	}
	head, err = store.Head(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	signHead(t, b, head)
	audited(41, 1)
}
