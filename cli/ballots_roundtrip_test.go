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

// Ballots of every kind, answers latest among them, imported, exported
// and imported elsewhere: the same logs (roots), the same figures, and
// rebuild clean on both sides; a line whose ballot breaks its poll's
// rules is rejected invalid_ballot.
func TestBallotsExportImport(t *testing.T) {
	t.Parallel()
	src, dst := testenv.Postgres(t), testenv.Postgres(t)
	polls := map[string][]string{
		"multi":  {"--kind", "multiple", "--max-choices", "2"},
		"appr":   {"--kind", "approve"},
		"score":  {"--kind", "score", "--max-score", "5", "--budget", "6"},
		"rank":   {"--kind", "ranked", "--answers", "latest"},
		"single": {"--answers", "latest"},
	}
	ballots := map[string][]string{
		"multi":  {`["a"]`, `["a","c"]`, `["b","c"]`},
		"appr":   {`{"a":"yes"}`, `{"a":"no","b":"abstain"}`, `{"c":"yes"}`},
		"score":  {`{"a":5}`, `{"a":1,"b":5}`, `{"c":0}`},
		"rank":   {`["a","b","c"]`, `["c"]`, `["b","a"]`},
		"single": {`"a"`, `"b"`, `"c"`},
	}
	for id, args := range polls {
		if r := tally(t, src.URL, append([]string{"poll", "create", id, "--title", "T", "--choice", "a", "--choice", "b", "--choice", "c"}, args...)...); r.code != 0 {
			t.Fatalf("poll create %s: %+v", id, r)
		}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	base := time.Now().Add(time.Minute).Truncate(time.Microsecond)
	var b strings.Builder
	for i := range 600 {
		id := []string{"multi", "appr", "score", "rank", "single"}[i%5]
		field := `"ballot":` + ballots[id][rng.IntN(3)]
		if id == "single" {
			field = `"candidate_id":` + ballots[id][rng.IntN(3)]
		}
		at := base.Add(time.Duration(i) * time.Millisecond).UTC().Format(time.RFC3339Nano)
		fmt.Fprintf(&b, `{"event_id":"e%d","poll_id":"%s",%s,"principal_id":"u%d","received_at":"%s"}`+"\n", i, id, field, rng.IntN(40), at)
	}
	// Over the budget, and twice the same choice: each rejected.
	b.WriteString(`{"event_id":"bad1","poll_id":"score","ballot":{"a":5,"b":5},"principal_id":"x1"}` + "\n")
	b.WriteString(`{"event_id":"bad2","poll_id":"rank","ballot":["a","a"],"principal_id":"x2"}` + "\n")
	dir := t.TempDir()
	in, export := filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "export.jsonl")
	if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	r := tally(t, src.URL, "import", in, "--batch-size", "50", "--workers", "2")
	if r.code != 0 || !strings.Contains(r.stdout, "invalid_ballot") {
		t.Fatalf("import: %+v", r)
	}
	if r := tally(t, src.URL, "export", export); r.code != 0 {
		t.Fatalf("export: %+v", r)
	}
	if r := tally(t, dst.URL, "import", export, "--batch-size", "64", "--workers", "3"); r.code != 0 || !strings.Contains(r.stdout, "poll created 5") {
		t.Fatalf("import of the export: %+v", r)
	}
	state := func(db testenv.DB) string {
		rows, err := db.Pool.Query(context.Background(), `
SELECT concat_ws(' ', poll_id, size, encode(root, 'hex')) FROM poll_log_heads
UNION ALL SELECT concat_ws(' ', poll_id, candidate_id, vote_count, yes_count, no_count, abstain_count, score_sum, borda_sum) FROM poll_results
UNION ALL SELECT concat_ws(' ', poll_id, winner, loser, ballots) FROM poll_pairwise
UNION ALL SELECT concat_ws(' ', poll_id, ballots) FROM poll_ballots
ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(out, "\n")
	}
	if want, got := state(src), state(dst); want != got {
		t.Fatalf("logs and figures differ after export and import:\nsource:\n%s\nimported:\n%s", want, got)
	}
	for _, db := range []testenv.DB{src, dst} {
		if r := tally(t, db.URL, "rebuild"); r.code != 0 {
			t.Fatalf("rebuild: %+v", r)
		}
	}
	if r := tally(t, src.URL, "poll", "show", "rank"); !strings.Contains(r.stdout, "Condorcet winner") || !strings.Contains(r.stdout, "BORDA") {
		t.Fatalf("poll show rank: %+v", r)
	}
}
