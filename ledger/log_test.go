package ledger_test

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"golang.org/x/mod/sumdb/tlog"

	"tally/internal/testenv"
	"tally/ledger"
	"tally/migrations"
	"tally/vote"
)

// referenceRoots hashes the ledger's rows as Export gives them (ledger
// order) with tlog's own in-memory tree, per poll: what an auditor holding
// an export computes. It also checks each poll's rows come in leaf order.
func referenceRoots(t *testing.T, b bundle) map[string]tlog.Hash {
	t.Helper()
	trees := map[string]map[int64]tlog.Hash{}
	sizes := map[string]int64{}
	err := b.store.Export(b.ctx, "", func(r ledger.LedgerRow) error {
		m := trees[r.PollID]
		if m == nil {
			m = map[int64]tlog.Hash{}
			trees[r.PollID] = m
		}
		h, err := r.LeafHash()
		if err != nil {
			return err
		}
		n := sizes[r.PollID]
		stored, err := tlog.StoredHashesForRecordHash(n, h, mapReader(m))
		if err != nil {
			return err
		}
		for j, sh := range stored {
			m[tlog.StoredHashIndex(0, n)+int64(j)] = sh
		}
		sizes[r.PollID] = n + 1
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	roots := map[string]tlog.Hash{}
	for poll, m := range trees {
		roots[poll], err = tlog.TreeHash(sizes[poll], mapReader(m))
		if err != nil {
			t.Fatal(err)
		}
	}
	return roots
}

type mapReader map[int64]tlog.Hash

func (m mapReader) ReadHashes(xs []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(xs))
	for i, x := range xs {
		h, ok := m[x]
		if !ok {
			return nil, fmt.Errorf("no hash at %d", x)
		}
		out[i] = h
	}
	return out, nil
}

// checkRootsMatchExport compares every poll's stored head with the roots
// an export hashes to.
func checkRootsMatchExport(t *testing.T, b bundle, polls ...string) {
	t.Helper()
	want := referenceRoots(t, b)
	for _, p := range polls {
		head, err := b.store.Head(b.ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		w, ok := want[p]
		if !ok {
			w = sha256Empty() // no rows: the empty tree
		}
		if head.Root != w {
			t.Errorf("poll %s: head root %s (size %d), the export hashes to %s", p, head.Root, head.Size, w)
		}
	}
}

// Batches with every outcome, through both of the append's steps, grow
// each poll's log to exactly the tree of its rows in ledger order.
func TestLogRootIsTheExportsTree(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll(t, "p1", "a", "b")
	b.poll(t, "p2", "a", "b")
	b.poll(t, "empty", "a")
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 30; i++ {
		batch := make([]ledger.Event, 1+rng.IntN(300))
		for j := range batch {
			batch[j] = ev(fmt.Sprintf("u%d", rng.IntN(2000)), fmt.Sprintf("k%d", rng.IntN(2)),
				[]string{"p1", "p2", "nopoll"}[rng.IntN(3)], []string{"a", "b", "c"}[rng.IntN(3)])
		}
		if _, err := b.store.Append(b.ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	rep := checkInvariants(t, b)
	if len(rep.Logs) != 3 {
		t.Fatalf("%d logs checked, want 3: %+v", len(rep.Logs), rep.Logs)
	}
	checkRootsMatchExport(t, b, "p1", "p2", "empty")
	head, err := b.store.Head(b.ctx, "empty")
	if err != nil {
		t.Fatal(err)
	}
	if head.Size != 1 {
		t.Errorf("empty poll's head: %+v, want size 1: its definition", head)
	}
}

// leafSeq is SQL for the seq of the ledger row that is leaf i of poll.
func leafSeq(poll string, i int64) string {
	return fmt.Sprintf(`(SELECT s.seq FROM poll_log_leaves l CROSS JOIN LATERAL unnest(l.seqs) WITH ORDINALITY AS s(seq, ord)
		WHERE l.poll_id = '%s' AND l.first_leaf + s.ord - 1 = %d)`, poll, i)
}

// tamper runs sql as a superuser with the append-only triggers off, as
// someone who holds the database could.
func tamper(t *testing.T, b bundle, sql string, args ...any) {
	t.Helper()
	tx, err := b.db.Pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx)
	if _, err := tx.Exec(b.ctx, `SET LOCAL session_replication_role = replica`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(b.ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
}

// Each change to the ledger that the database's owner can make, with the
// projection fixed to match, is found by rebuild, which names the poll
// and the first leaf concerned.
func TestRebuildFindsATamperedLedger(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		sql      string
		wantLeaf int64
		want     string
	}{
		{"changed candidate", `UPDATE poll_events SET candidate_id = CASE candidate_id WHEN 'a' THEN 'b' ELSE 'a' END WHERE seq = ` + leafSeq("p", 300), 300, "does not hash"},
		{"deleted row", `DELETE FROM poll_events WHERE seq = ` + leafSeq("p", 77), 77, "missing"},
		{"deleted last row", `DELETE FROM poll_events WHERE seq = ` + leafSeq("p", 600), 600, "missing"},
		{"inserted row", `INSERT INTO poll_events (poll_id, candidate_id, principal_id, client_event_id, fingerprint, received_at)
			VALUES ('p', 'a', 'mallory', 'k', '\x00', now())`, 601, "in no leaf"},
		// Leaf 0 is the poll's definition, alone in its leaves row; the
		// votes' leaves start at 1.
		{"swapped rows", `UPDATE poll_log_leaves SET seqs = seqs[1:5] || seqs[7] || seqs[6] || seqs[8:] WHERE poll_id = 'p' AND first_leaf = 1`, 6, "does not hash"},
		{"changed time", `UPDATE poll_events SET received_at = received_at + interval '1 microsecond' WHERE seq = ` + leafSeq("p", 513), 513, "does not hash"},
		// A stored tile changed or missing, the rows untouched: the first
		// tile that differs, in the order the rows make them, is named.
		{"changed tile", `UPDATE poll_log_tiles SET hashes = set_byte(hashes, 64, 255 - get_byte(hashes, 64)) WHERE poll_id = 'p' AND level = 0 AND idx = 2`, 34, "does not hash"},
		{"changed upper tile", `UPDATE poll_log_tiles SET hashes = set_byte(hashes, 96, 255 - get_byte(hashes, 96)) WHERE poll_id = 'p' AND level = 1 AND idx = 1`, 304, "tile 1/1 of the log differs"},
		{"missing tile", `DELETE FROM poll_log_tiles WHERE poll_id = 'p' AND level = 0 AND idx = 5`, 80, "tile 0/5 of the log is missing"},
		{"missing tile before a changed one", `WITH gone AS (DELETE FROM poll_log_tiles WHERE poll_id = 'p' AND level = 0 AND idx = 3)
			UPDATE poll_log_tiles SET hashes = set_byte(hashes, 0, 255 - get_byte(hashes, 0)) WHERE poll_id = 'p' AND level = 0 AND idx = 20`, 48, "tile 0/3 of the log is missing"},
		{"changed tile before a missing one", `WITH gone AS (DELETE FROM poll_log_tiles WHERE poll_id = 'p' AND level = 0 AND idx = 20)
			UPDATE poll_log_tiles SET hashes = set_byte(hashes, 0, 255 - get_byte(hashes, 0)) WHERE poll_id = 'p' AND level = 0 AND idx = 3`, 48, "does not hash"},
		// Only the head's root, with the rows, leaves and tiles untouched:
		// no leaf is to blame (-1).
		{"changed root", `UPDATE poll_log_heads SET root = sha256('other') WHERE poll_id = 'p'`, -1, "the rows hash to root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.poll(t, "p", "a", "b")
			b.poll(t, "q", "a", "b")
			for i := 0; i < 3; i++ {
				batch := make([]ledger.Event, 200)
				for j := range batch {
					batch[j] = ev(fmt.Sprintf("u%d-%d", i, j), "k", "p", []string{"a", "b"}[j%2])
				}
				batch = append(batch, ev(fmt.Sprintf("v%d", i), "k", "q", "a"))
				if _, err := b.store.Append(b.ctx, batch); err != nil {
					t.Fatal(err)
				}
			}
			// An honest ledger's logs are all hashed in the one pass.
			if polls, err := ledger.OnePassPolls(b.ctx, b.store); err != nil || !slices.Equal(polls, []string{"p", "q"}) {
				t.Fatalf("the one pass hashed %v (%v), want p and q", polls, err)
			}
			tamper(t, b, tc.sql)
			// The untouched poll still is; p is too, unless its leaves no
			// longer line up with its rows (a row deleted), when the
			// per-poll check names the leaf.
			polls, err := ledger.OnePassPolls(b.ctx, b.store)
			if err != nil || !slices.Contains(polls, "q") || slices.Contains(polls, "p") == strings.Contains(tc.name, "deleted") {
				t.Fatalf("after the tampering, the one pass hashed %v (%v)", polls, err)
			}
			// The projection made to agree, as a careful tamperer would.
			if _, err := b.store.Repair(b.ctx, ""); err != nil {
				t.Fatal(err)
			}
			assertOnlyPFound(t, b, tc.wantLeaf, tc.want)
		})
	}
}

// A rewritten head (size and root of a log the owner recomputed after
// deleting a row) is found too: the stored tiles still hold the old rows.
func TestRebuildFindsARewrittenHead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll(t, "p", "a", "b")
	batch := make([]ledger.Event, 700)
	for j := range batch {
		batch[j] = ev(fmt.Sprintf("u%d", j), "k", "p", "a")
	}
	if _, err := b.store.Append(b.ctx, batch); err != nil {
		t.Fatal(err)
	}
	tamper(t, b, `DELETE FROM poll_events WHERE seq = `+leafSeq("p", 10))
	tamper(t, b, `UPDATE poll_log_leaves SET seqs = seqs[1:9] || seqs[11:] WHERE poll_id = 'p' AND first_leaf = 1`)
	tamper(t, b, `UPDATE poll_log_heads SET size = 700 WHERE poll_id = 'p'`)
	rep, err := b.store.Rebuild(b.ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if rep.LogProblems != 1 || rep.Logs[0].Leaf != 10 {
		t.Fatalf("log checks %+v, want the problem at leaf 10", rep.Logs)
	}
}

// A ledger from before the log gets its leaf indexes from the migration
// and its tree from BuildLogs, in ledger order: the roots an export of it
// hashes to.
func TestMigrationBuildsLogsOfExistingRows(t *testing.T) {
	t.Parallel()
	db, sqlDB, p := migratedTo(t, 3)
	ctx := context.Background()
	oldRows(t, sqlDB)
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b := bundle{db: db, store: store, ctx: ctx}
	if _, err := store.Head(ctx, "big"); err == nil {
		t.Fatal("the head of a poll with old rows has a root before BuildLogs")
	}
	built, err := store.BuildLogs(ctx)
	if err != nil || built != 2 {
		t.Fatalf("BuildLogs: %d built, %v; want 2 (big and small; empty has its root)", built, err)
	}
	checkRootsMatchExport(t, b, "big", "small", "empty")
	// New rows extend the built logs.
	if _, err := store.Append(ctx, []ledger.Event{ev("new", "k", "big", "a"), ev("new", "k2", "small", "a")}); err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, b)
	checkRootsMatchExport(t, b, "big", "small", "empty")
}

// oldRows writes polls and ledger rows as a tally from before the log did
// (migration 3), interleaving the polls' rows.
func oldRows(t *testing.T, db *sql.DB) {
	t.Helper()
	for _, stmt := range []string{
		`INSERT INTO polls (id, title, opens_at) VALUES ('big', 'Big', '1970-01-01'), ('small', 'Small', '1970-01-01'), ('empty', 'Empty', '1970-01-01')`,
		`INSERT INTO poll_choices VALUES ('big', 'a', 0), ('big', 'b', 1), ('small', 'a', 0), ('empty', 'a', 0)`,
		// The fingerprint as vote.Fingerprint makes it: SHA-256 of poll, NUL, candidate.
		`INSERT INTO poll_events (poll_id, candidate_id, principal_id, client_event_id, fingerprint, received_at)
		 SELECT p, c, 'u' || i, 'k' || i, sha256(convert_to(p, 'UTF8') || '\x00'::bytea || convert_to(c, 'UTF8')),
		        timestamptz '2026-01-01' + i * interval '1 millisecond'
		 FROM (SELECT i, CASE WHEN i % 7 = 0 THEN 'small' ELSE 'big' END AS p, CASE WHEN i % 3 = 0 THEN 'b' ELSE 'a' END AS c
		       FROM generate_series(1, 1000) i WHERE NOT (i % 7 = 0 AND i % 3 = 0)) r`,
		`INSERT INTO poll_results SELECT poll_id, candidate_id, count(*) FROM poll_events GROUP BY 1, 2`,
	} {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
}

func sha256Empty() [32]byte {
	h, _ := tlog.TreeHash(0, nil)
	return h
}

// A fingerprint changed alone leaves the tree intact (the leaf does not
// cover it) and is found by its own check, which names the leaf: the pass
// checks a row's fingerprint as it comes, whether the row goes to its
// hasher at once or waits for its leaf (leaves late: every row waits).
func TestRebuildFindsATamperedFingerprint(t *testing.T) {
	t.Parallel()
	bothWays(t, "leaves late", ledger.LeavesAfterRows, rebuildFindsATamperedFingerprint)
}

func rebuildFindsATamperedFingerprint(t *testing.T, b bundle) {
	b.poll(t, "p", "a", "b")
	b.poll(t, "q", "a", "b")
	batch := make([]ledger.Event, 300)
	for j := range batch {
		batch[j] = ev(fmt.Sprintf("u%d", j), "k", []string{"p", "q"}[j%2], []string{"a", "b"}[j%3%2])
	}
	if _, err := b.store.Append(b.ctx, batch); err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, b)
	// The fingerprint of (p, b) on a row that says (p, a): the same
	// length and a real fingerprint, only not this row's.
	other := vote.Fingerprint("p", "b")
	tamper(t, b, `UPDATE poll_events SET fingerprint = $1 WHERE candidate_id = 'a' AND seq = `+leafSeq("p", 43), other[:])
	tamper(t, b, `UPDATE poll_events SET fingerprint = $1 WHERE candidate_id = 'a' AND seq = `+leafSeq("p", 77), other[:])
	assertOnlyPFound(t, b, 43, "fingerprint does not match")
}

// assertOnlyPFound rebuilds every poll and fails unless the figures agree
// and the one log problem is poll p's, at leaf wantLeaf, naming want,
// with poll q untouched.
func assertOnlyPFound(t *testing.T, b bundle, wantLeaf int64, want string) {
	t.Helper()
	rep, err := b.store.Rebuild(b.ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Differing != 0 || rep.LogProblems != 1 {
		t.Fatalf("differing %d, log problems %d, want 0 and 1: %+v", rep.Differing, rep.LogProblems, rep.Logs)
	}
	for _, c := range rep.Logs {
		switch {
		case c.PollID == "q" && !c.OK():
			t.Errorf("untouched poll q reported: %+v", c)
		case c.PollID == "p" && (c.Leaf != wantLeaf || !strings.Contains(c.Problem, want)):
			t.Errorf("poll p: leaf %d %q, want leaf %d and %q", c.Leaf, c.Problem, wantLeaf, want)
		}
	}
}

// Migration 7 moves the leaf order of the logs already built out of
// leaf_index into poll_log_leaves, unchanged, leaves a log still to build
// to BuildLogs, and its Down gives leaf_index back as it was.
func TestMigrationMovesLeafOrder(t *testing.T) {
	t.Parallel()
	db, sqlDB, p := migratedTo(t, 3)
	ctx := context.Background()
	oldRows(t, sqlDB)
	if _, err := p.UpTo(ctx, 6); err != nil {
		t.Fatal(err)
	}
	// As if big's log had been built: only the root's presence matters here.
	if _, err := sqlDB.Exec(`UPDATE poll_log_heads SET root = sha256('') WHERE poll_id = 'big'`); err != nil {
		t.Fatal(err)
	}
	leafOrder := func(sql string) []int64 {
		t.Helper()
		var seqs []int64
		if err := db.Pool.QueryRow(ctx, sql).Scan(&seqs); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return seqs
	}
	const byLeafIndex = `SELECT array_agg(seq ORDER BY leaf_index) FROM poll_events WHERE poll_id = 'big'`
	before := leafOrder(byLeafIndex)
	if _, err := p.UpTo(ctx, 7); err != nil {
		t.Fatal(err)
	}
	after := leafOrder(`SELECT array_agg(s.seq ORDER BY l.first_leaf, s.ord) FROM poll_log_leaves l
		CROSS JOIN LATERAL unnest(l.seqs) WITH ORDINALITY AS s(seq, ord) WHERE l.poll_id = 'big'`)
	if len(before) == 0 || !slices.Equal(before, after) {
		t.Fatalf("big's leaves after migration 7: %v, want %v", after, before)
	}
	var small int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM poll_log_leaves WHERE poll_id = 'small'`).Scan(&small); err != nil || small != 0 {
		t.Fatalf("small (still to build) has %d leaf rows (%v), want none", small, err)
	}
	if _, err := p.DownTo(ctx, 6); err != nil {
		t.Fatal(err)
	}
	if again := leafOrder(byLeafIndex); !slices.Equal(before, again) {
		t.Fatalf("leaf_index after migration 7's Down: %v, want %v", again, before)
	}
}

// Migration 9 drops the tiles and the heads' roots (a change of tile
// height); BuildLogs then hashes every poll's leaves again, definitions
// and votes, in their leaf order, to the same roots: the signed
// checkpoints still hold.
func TestMigrationRetilesTheLogs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll(t, "p", "a", "b")
	b.poll(t, "q", "a", "b")
	for i := range 3 {
		batch := make([]ledger.Event, 150)
		for j := range batch {
			batch[j] = ev(fmt.Sprintf("u%d-%d", i, j), "k", []string{"p", "q"}[j%2], []string{"a", "b"}[j%3%2])
		}
		if _, err := b.store.Append(b.ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	before := map[string]ledger.LogHead{}
	for _, poll := range []string{"p", "q"} {
		h, err := b.store.Head(b.ctx, poll)
		if err != nil {
			t.Fatal(err)
		}
		before[poll] = h
	}
	// Migration 9's Up, run again on logs that hold definitions (going
	// down past migration 11 is refused once a definition is logged).
	file, err := migrations.FS.ReadFile("00009_log_tiles_height4.sql")
	if err != nil {
		t.Fatal(err)
	}
	up, _, _ := strings.Cut(string(file), "-- +goose Down")
	tamper(t, b, up)
	if _, err := b.store.Head(b.ctx, "p"); err == nil {
		t.Fatal("p's head has a root before BuildLogs")
	}
	if built, err := b.store.BuildLogs(b.ctx); err != nil || built != 2 {
		t.Fatalf("BuildLogs: %d built, %v; want 2", built, err)
	}
	for poll, want := range before {
		if got, err := b.store.Head(b.ctx, poll); err != nil || got != want {
			t.Errorf("poll %s after the tiles were made again: %+v (%v), want %+v", poll, got, err, want)
		}
	}
	checkInvariants(t, b)
	checkRootsMatchExport(t, b, "p", "q")
}

// migratedTo is a database of its own migrated up to version, with the
// database/sql handle and the goose provider to go on.
func migratedTo(t *testing.T, version int64) (testenv.DB, *sql.DB, *goose.Provider) {
	t.Helper()
	db := testenv.EmptyPostgres(t)
	sqlDB := stdlib.OpenDBFromPool(db.Pool)
	t.Cleanup(func() { sqlDB.Close() })
	p, err := migrations.NewProvider(sqlDB)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(context.Background(), version); err != nil {
		t.Fatal(err)
	}
	return db, sqlDB, p
}

// A poll of more distinct ballots than the pass numbers (4096: past them
// a row carries its ballot itself) is recounted and hashed in the one
// pass all the same, and a row past them that was changed is named.
func TestRebuildPastTheNumberedAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.ballotPoll(t, "r", vote.Spec{Kind: "ranked"}, 7)
	var perms [][]string
	var permute func(done, rest []string)
	permute = func(done, rest []string) {
		if len(rest) == 0 {
			perms = append(perms, slices.Clone(done))
			return
		}
		for i := range rest {
			permute(append(done, rest[i]), append(slices.Clone(rest[:i]), rest[i+1:]...))
		}
	}
	permute(nil, []string{"c0", "c1", "c2", "c3", "c4", "c5", "c6"})
	for start := 0; start < len(perms); start += 1000 {
		var batch []ledger.Event
		for i := start; i < min(start+1000, len(perms)); i++ {
			batch = append(batch, ballotEv(fmt.Sprintf("u%d", i), "k", "r", vote.Ballot{Kind: vote.KindRanked, Choices: perms[i]}.Canonical()))
		}
		if _, err := b.store.Append(b.ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	if polls, err := ledger.OnePassPolls(b.ctx, b.store); err != nil || !slices.Equal(polls, []string{"r"}) {
		t.Fatalf("the one pass hashed %v (%v), want r", polls, err)
	}
	rep, err := b.store.Rebuild(b.ctx, "")
	if err != nil || rep.Differing != 0 || rep.LogProblems != 0 || rep.LedgerEvents != int64(len(perms)) {
		t.Fatalf("rebuild: %v, %d differing, %d log problems, %d events, want none, none and %d", err, rep.Differing, rep.LogProblems, rep.LedgerEvents, len(perms))
	}
	tamper(t, b, `UPDATE poll_events SET received_at = received_at + interval '1 microsecond' WHERE seq = `+leafSeq("r", 5000))
	rep, err = b.store.Rebuild(b.ctx, "")
	if err != nil || rep.LogProblems != 1 || rep.Logs[0].Leaf != 5000 || !strings.Contains(rep.Logs[0].Problem, "does not hash") {
		t.Fatalf("rebuild after a row past the numbered answers changed: %v, %+v", err, rep.Logs)
	}
}

// A poll of answers latest counts each principal's last ballot in the
// poll's log, which is not always its last by seq: with a principal's two
// leaves swapped, the rebuild counts the one now last in leaf order,
// whether its pass keeps the last ballots or latestSQL reads them.
func TestRebuildCountsLatestInLeafOrder(t *testing.T) {
	t.Parallel()
	bothWays(t, "in SQL", ledger.LatestInSQL, func(t *testing.T, b bundle) {
		p := b.ballotPoll(t, "l", vote.Spec{Answers: "latest"}, 2)
		batch := []ledger.Event{
			ledger.EventOf("u0", "k1", p.ID, "c0", time.Now()),
			ledger.EventOf("u0", "k2", p.ID, "c1", time.Now()),
			ledger.EventOf("u1", "k1", p.ID, "c1", time.Now()),
		}
		if _, err := b.store.Append(b.ctx, batch); err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, b) // u0's last is c1, in the log and by seq
		var first string
		if err := b.db.Pool.QueryRow(b.ctx, `SELECT candidate_id FROM poll_events WHERE seq = `+leafSeq("l", 1)).Scan(&first); err != nil || first != "c0" {
			t.Fatalf("leaf 1 is %q (%v), want u0's c0", first, err)
		}
		tamper(t, b, `UPDATE poll_log_leaves SET seqs = seqs[2:2] || seqs[1:1] || seqs[3:] WHERE poll_id = 'l' AND first_leaf = 1`)
		rep, err := b.store.Rebuild(b.ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, r := range rep.Rows {
			if r.PollID == "l" && r.Figure == ledger.FigureVotes {
				got[r.CandidateID] = r.Ledger
			}
		}
		if want := map[string]int64{"c0": 1, "c1": 1}; !maps.Equal(got, want) {
			t.Fatalf("the ledger's votes %v, want %v (u0's last in leaf order is now c0)", got, want)
		}
		if rep.LogProblems != 1 {
			t.Fatalf("log problems %d, want 1 (the swap changes the root): %+v", rep.LogProblems, rep.Logs)
		}
	})
}
