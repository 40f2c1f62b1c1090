package cli

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"tally/internal/testenv"
)

// An export imported into an empty database, with several workers,
// reproduces every poll's log: the same sizes and roots, so checkpoints
// signed by one deployment verify against the other.
func TestExportImportKeepsLogRoots(t *testing.T) {
	t.Parallel()
	src, dst := testenv.Postgres(t), testenv.Postgres(t)
	for _, p := range []string{"p0", "p1", "p2"} {
		if r := tally(t, src.URL, "poll", "create", p, "--title", "Poll "+p+"?", "--choice", "a", "--choice", "b"); r.code != 0 {
			t.Fatalf("poll create: %+v", r)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var b strings.Builder
	// Times after the polls opened, within the skew import allows, to the
	// microsecond (the leaf holds received_at).
	base := time.Now().Add(time.Minute).Truncate(time.Microsecond)
	for i := 0; i < 2500; i++ {
		at := base.Add(time.Duration(rng.IntN(60_000_000)) * time.Microsecond).UTC().Format(time.RFC3339Nano)
		fmt.Fprintf(&b, `{"event_id":"e%d","poll_id":"p%d","candidate_id":"%s","principal_id":"u%d","received_at":"%s"}`+"\n",
			i, rng.IntN(3), []string{"a", "b"}[rng.IntN(2)], rng.IntN(900), at)
	}
	dir := t.TempDir()
	in, export := filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "export.jsonl")
	if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	// The source gets its rows in batches of several workers, so its polls'
	// rows interleave in the ledger.
	if r := tally(t, src.URL, "import", in, "--batch-size", "40", "--workers", "3"); r.code != 0 {
		t.Fatalf("import into the source: %+v", r)
	}
	// p1 closes after its votes, then p0 takes one more: p1's log ends
	// with its second definition, p0's has none past its first.
	if r := tally(t, src.URL, "poll", "close", "p1", "--at", base.Add(2*time.Minute).Format(time.RFC3339Nano)); r.code != 0 {
		t.Fatalf("poll close: %+v", r)
	}
	late := filepath.Join(dir, "late.jsonl")
	write(t, late, `{"event_id":"late","poll_id":"p0","candidate_id":"a","principal_id":"late"}`+"\n")
	if r := tally(t, src.URL, "import", late); r.code != 0 {
		t.Fatalf("import into the source: %+v", r)
	}
	if r := tally(t, src.URL, "export", export); r.code != 0 {
		t.Fatalf("export: %+v", r)
	}
	// The destination has no polls: the export's definitions create them
	// and close p1 where the source closed it.
	r := tally(t, dst.URL, "import", export, "--batch-size", "64", "--workers", "3")
	if r.code != 0 || !strings.Contains(r.stdout, "definitions: poll created 3, poll closed 1") {
		t.Fatalf("import of the export: %+v", r)
	}
	heads := func(db testenv.DB) []string {
		rows, err := db.Pool.Query(context.Background(), `SELECT concat_ws(' ', poll_id, size, encode(root, 'hex')) FROM poll_log_heads ORDER BY poll_id`)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	want, got := heads(src), heads(dst)
	if strings.Join(want, "\n") != strings.Join(got, "\n") {
		t.Fatalf("log heads differ after export and import:\nsource:\n%s\nimported:\n%s", strings.Join(want, "\n"), strings.Join(got, "\n"))
	}
	if len(want) != 3 || strings.Contains(want[0], " 0 ") {
		t.Fatalf("heads %v: want three polls with rows", want)
	}
}

// A head whose root alone was rewritten (as a superuser, triggers off),
// with the rows, leaves and tiles untouched, fails tally rebuild: exit 1
// and the poll named with the two roots.
func TestRebuildFindsARewrittenRoot(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	if r := tally(t, db.URL, "poll", "create", "lunch", "--title", "Lunch?", "--choice", "pizza", "--choice", "sushi"); r.code != 0 {
		t.Fatalf("poll create: %+v", r)
	}
	var b strings.Builder
	for i := range 20 {
		fmt.Fprintf(&b, `{"event_id":"e%d","poll_id":"lunch","candidate_id":"pizza","principal_id":"u%d"}`+"\n", i, i)
	}
	in := filepath.Join(t.TempDir(), "in.jsonl")
	if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := tally(t, db.URL, "import", in); r.code != 0 {
		t.Fatalf("import: %+v", r)
	}
	if r := tally(t, db.URL, "rebuild"); r.code != 0 || !strings.Contains(r.stdout, "OK: every poll's log verifies") {
		t.Fatalf("rebuild before the change: %+v", r)
	}
	err := pgx.BeginFunc(t.Context(), db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(t.Context(), `SET LOCAL session_replication_role = replica`); err != nil {
			return err
		}
		_, err := tx.Exec(t.Context(), `UPDATE poll_log_heads SET root = sha256('other') WHERE poll_id = 'lunch'`)
		return err
	})
	if err != nil {
		t.Fatalf("rewrite the root: %v", err)
	}
	r := tally(t, db.URL, "rebuild")
	if r.code != 1 || !strings.Contains(r.stdout, "LOG MISMATCH: 1 of 1 polls' logs") ||
		!regexp.MustCompile(`lunch\s+-1\s+21\s+20\s+1\s+the rows hash to root`).MatchString(r.stdout) {
		t.Fatalf("rebuild after the root was rewritten: want exit 1 and poll lunch's roots named, got %+v", r)
	}
}

// A poll only listed principals may answer cannot be made from the export,
// which holds its list by hash only: import stops and says to create it
// first; created with the same definition, the import then reproduces
// its log.
func TestImportOfAListedPoll(t *testing.T) {
	t.Parallel()
	src, dst := testenv.Postgres(t), testenv.Postgres(t)
	opens := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond).Format(time.RFC3339Nano)
	create := []string{"poll", "create", "team", "--title", "Thursdays?", "--choice", "yes", "--choice", "no",
		"--eligible", "u1", "--eligible", "u2", "--opens-at", opens}
	if r := tally(t, src.URL, create...); r.code != 0 {
		t.Fatalf("poll create: %+v", r)
	}
	dir := t.TempDir()
	in, export := filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "export.jsonl")
	write(t, in, `{"event_id":"e1","poll_id":"team","candidate_id":"yes","principal_id":"u1"}`+"\n"+
		`{"event_id":"e1","poll_id":"team","candidate_id":"no","principal_id":"u2"}`+"\n")
	if r := tally(t, src.URL, "import", in); r.code != 0 {
		t.Fatalf("import into the source: %+v", r)
	}
	if r := tally(t, src.URL, "export", export); r.code != 0 {
		t.Fatalf("export: %+v", r)
	}
	if r := tally(t, dst.URL, "import", export); r.code == 0 || !strings.Contains(r.stderr, "create the poll with tally poll create and its --eligible list") {
		t.Fatalf("import of a listed poll into a database without it: %+v, want it refused, saying what to do", r)
	}
	// Created with another list, it is kept, and the import says its log
	// cannot be the export's.
	other := testenv.Postgres(t)
	if r := tally(t, other.URL, append(slices.Clone(create[:len(create)-2]), "--eligible", "u3", "--opens-at", opens)...); r.code != 0 {
		t.Fatalf("poll create with another list: %+v", r)
	}
	if r := tally(t, other.URL, "import", export); r.code != 0 || !strings.Contains(r.stdout, "warning: polls kept as they are here, though their question differs from the export's (1 differs in its eligible_hash)") {
		t.Fatalf("import into a poll of another list: %+v", r)
	}
	if r := tally(t, dst.URL, create...); r.code != 0 {
		t.Fatalf("poll create in the destination: %+v", r)
	}
	if r := tally(t, dst.URL, "import", export); r.code != 0 || !strings.Contains(r.stdout, "definitions: poll kept 1") {
		t.Fatalf("import once the poll exists: %+v", r)
	}
	head := func(db testenv.DB) string {
		var s string
		if err := db.Pool.QueryRow(context.Background(), `SELECT concat_ws(' ', size, encode(root, 'hex')) FROM poll_log_heads WHERE poll_id = 'team'`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if a, b := head(src), head(dst); a != b || !strings.HasPrefix(a, "3 ") {
		t.Fatalf("team's head: source %s, destination %s; want the same 3 leaves", a, b)
	}
}
