package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tally/internal/testenv"
)

// tally export FILE writes the lines to FILE and only the count to
// standard error; --poll keeps one poll's events; the table of tally
// import names every outcome.
func TestExportToFile(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	for _, poll := range []string{"a", "b"} {
		if r := tally(t, db.URL, "poll", "create", poll, "--title", "T", "--choice", "x"); r.code != 0 {
			t.Fatalf("poll create %s: %+v", poll, r)
		}
	}
	in := filepath.Join(t.TempDir(), "in.jsonl")
	lines := `{"event_id":"e1","poll_id":"a","candidate_id":"x","principal_id":"u1"}
{"event_id":"e2","poll_id":"b","candidate_id":"x","principal_id":"u1"}
{"event_id":"e3","poll_id":"b","candidate_id":"x","principal_id":"u2"}
`
	if err := os.WriteFile(in, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	r := tally(t, db.URL, "import", in)
	if r.code != 0 || !strings.Contains(r.stdout, "recorded") || !strings.Contains(r.stdout, "rejected: not_eligible") ||
		!strings.Contains(r.stdout, "total") {
		t.Fatalf("import: %+v; want a table naming every outcome", r)
	}
	out := filepath.Join(t.TempDir(), "out.jsonl")
	r = tally(t, db.URL, "export", out, "--poll", "b")
	if r.code != 0 || r.stdout != "" || r.stderr != "exported 2 events and 1 definitions\n" {
		t.Fatalf("export FILE: %+v", r)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(got), "\n"); n != 3 || strings.Contains(string(got), `"poll_id":"a"`) {
		t.Fatalf("export --poll b wrote %d lines:\n%s", n, got)
	}
}
