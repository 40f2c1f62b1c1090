package cli

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
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
	for _, db := range []testenv.DB{src, dst} {
		for _, p := range []string{"p0", "p1", "p2"} {
			if r := tally(t, db.URL, "poll", "create", p, "--title", p, "--choice", "a", "--choice", "b"); r.code != 0 {
				t.Fatalf("poll create: %+v", r)
			}
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var b strings.Builder
	// Times after the polls opened, within the skew import allows, to the
	// microsecond (the leaf holds received_at).
	base := time.Now().Add(time.Minute)
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
	if r := tally(t, src.URL, "export", export); r.code != 0 {
		t.Fatalf("export: %+v", r)
	}
	if r := tally(t, dst.URL, "import", export, "--batch-size", "64", "--workers", "3"); r.code != 0 {
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
