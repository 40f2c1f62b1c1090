package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tally/audit"
	"tally/internal/testenv"
)

// TestImportRefusesFutureReceivedAt: an event received later than the time
// of the import plus maxReceivedSkew stops the import at its line, which
// the error names, after the events before it were imported.
func TestImportRefusesFutureReceivedAt(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	if r := tally(t, db.URL, "poll", "create", "lunch", "--title", "Lunch?", "--choice", "pizza"); r.code != 0 {
		t.Fatalf("poll create: %+v", r)
	}
	at := func(d time.Duration) string { return time.Now().Add(d).UTC().Format(audit.TimeFormat) }
	line := func(id, receivedAt string) string {
		return fmt.Sprintf(`{"event_id":%q,"poll_id":"lunch","candidate_id":"pizza","principal_id":%q,"received_at":%q}`, id, id, receivedAt)
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	lines := []string{
		line("u1", at(0)),
		line("u2", at(time.Minute)), // within the skew: another clock a little ahead
		"",
		line("u3", future),
		line("u4", at(0)),
	}
	file := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := tally(t, db.URL, "import", file)
	want := `line 4: field "received_at" is ` + future + `, later than the time of the import`
	if r.code != 2 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "the events before it were imported") {
		t.Fatalf("import of a future received_at: %+v, want exit 2 and %q", r, want)
	}
	var n int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM poll_events`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("the ledger holds %d events, want the 2 before the refused line (recorded: the poll opened before them)", n)
	}
}
