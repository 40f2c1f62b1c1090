package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"tally/internal/testenv"
)

type run struct {
	code           int
	stdout, stderr string
}

// runMu serialises Run in tests: urfave/cli writes its package-level help
// flag while parsing, which the race detector sees across parallel tests.
// A real process runs one command.
var runMu sync.Mutex

// tally runs the command line with the test database, as a user would.
func tally(t *testing.T, dbURL string, args ...string) run {
	t.Helper()
	runMu.Lock()
	defer runMu.Unlock()
	var out, errOut bytes.Buffer
	full := append([]string{"tally"}, args...)
	full = append(full, "--database-url", dbURL, "--log-format", "text")
	code := Run(context.Background(), full, strings.NewReader(""), &out, &errOut)
	return run{code, out.String(), errOut.String()}
}

func TestAdminCommands(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	url := db.URL

	r := tally(t, url, "principal", "add", "alice", "--credential-key", credentialKeyFile(t))
	if r.code != 0 || !regexp.MustCompile(`^eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\n$`).MatchString(r.stdout) {
		t.Fatalf("principal add: code %d stdout %q stderr %q; want the token alone on stdout", r.code, r.stdout, r.stderr)
	}
	if r := tally(t, url, "poll", "create", "lunch", "--title", "Lunch?", "--choice", "pizza", "--choice", "sushi"); r.code != 0 {
		t.Fatalf("poll create: %+v", r)
	}
	if r := tally(t, url, "poll", "create", "lunch", "--title", "again", "--choice", "x"); r.code != 2 || !strings.Contains(r.stderr, "already exists") {
		t.Fatalf("second poll create: %+v", r)
	}

	file := filepath.Join(t.TempDir(), "events.jsonl")
	lines := `{"event_id":"e1","poll_id":"lunch","candidate_id":"pizza","principal_id":"u1"}
{"event_id":"e1","poll_id":"lunch","candidate_id":"pizza","principal_id":"u2"}
{"event_id":"e2","poll_id":"lunch","candidate_id":"sushi","principal_id":"u2"}
{"event_id":"e1","poll_id":"lunch","candidate_id":"tacos","principal_id":"u3"}
`
	if err := os.WriteFile(file, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	counts := func(r run) map[string]int {
		var v struct{ Outcomes map[string]int }
		if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
			t.Fatalf("import output %q: %v", r.stdout, err)
		}
		return v.Outcomes
	}
	r = tally(t, url, "import", file, "--format", "json")
	if c := counts(r); r.code != 0 || c["recorded"] != 2 || c["rejected: already_responded"] != 1 || c["rejected: invalid_choice"] != 1 {
		t.Fatalf("first import: %+v", r)
	}
	r = tally(t, url, "import", file, "--format", "json")
	if c := counts(r); r.code != 0 || c["duplicate"] != 2 || c["recorded"] != 0 {
		t.Fatalf("second import changed something: %+v", r)
	}

	r = tally(t, url, "rebuild")
	if r.code != 0 || !strings.Contains(r.stdout, "OK: the projection equals the ledger (2 events") {
		t.Fatalf("rebuild: %+v", r)
	}
	if _, err := db.Pool.Exec(context.Background(), `UPDATE poll_results SET vote_count = 5 WHERE candidate_id = 'sushi'`); err != nil {
		t.Fatal(err)
	}
	r = tally(t, url, "rebuild")
	if r.code != 1 || !regexp.MustCompile(`lunch\s+sushi\s+0\s+5\s+DIFFERS`).MatchString(r.stdout) {
		t.Fatalf("rebuild after drift: want exit 1 naming lunch/sushi, got %+v", r)
	}
	r = tally(t, url, "rebuild", "--format", "json")
	var rep struct {
		Equal bool
		Rows  []struct {
			PollID, CandidateID string `json:"-"`
			Ledger, Projection  int64
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); r.code != 1 || err != nil || rep.Equal {
		t.Fatalf("rebuild --format json after drift: %+v (%v)", r, err)
	}
	r = tally(t, url, "rebuild", "--apply")
	if r.code != 0 || !strings.Contains(r.stdout, "rewrote 1 rows") {
		t.Fatalf("rebuild --apply: %+v", r)
	}
	if r := tally(t, url, "rebuild", "--poll", "nope"); r.code != 2 || !strings.Contains(r.stderr, "no such poll") {
		t.Fatalf("rebuild --poll nope: %+v", r)
	}

	r = tally(t, url, "export")
	if r.code != 0 || strings.Count(r.stdout, "\n") != 3 || !strings.Contains(r.stdout, `"principal_id":"u1"`) ||
		!strings.HasPrefix(r.stdout, `{"kind":"definition","poll_id":"lunch","title":"Lunch?",`) {
		t.Fatalf("export: %+v; want the poll's definition and its 2 events", r)
	}
	// The export imports back as duplicates.
	if err := os.WriteFile(file, []byte(r.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	if c := counts(tally(t, url, "import", file, "--format", "json")); c["duplicate"] != 2 || len(c) != 1 {
		t.Fatalf("re-import of the export: %v", c)
	}

	// A bad line stops the import after applying the lines before it.
	bad := `{"event_id":"e9","poll_id":"lunch","candidate_id":"pizza","principal_id":"u9"}
{"event_id":"e9","poll_id":"lunch","candidate_id":"pizza","principal_id":"u8","vote":"twice"}
`
	if err := os.WriteFile(file, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	r = tally(t, url, "import", file)
	if r.code != 2 || !strings.Contains(r.stderr, `line 2: unknown field "vote"`) {
		t.Fatalf("import of a bad line: %+v", r)
	}
	if r := tally(t, url, "poll", "show", "lunch"); !regexp.MustCompile(`pizza\s+3\n`).MatchString(r.stdout) {
		t.Fatalf("the line before the bad one was not kept: %+v", r)
	}

	if r := tally(t, url, "poll", "close", "lunch"); r.code != 0 {
		t.Fatalf("poll close: %+v", r)
	}
	if r := tally(t, url, "poll", "list"); !regexp.MustCompile(`lunch\s+closed`).MatchString(r.stdout) {
		t.Fatalf("poll list after close: %+v", r)
	}
}

func TestMigrateCommands(t *testing.T) {
	t.Parallel()
	db := testenv.EmptyPostgres(t)
	for _, step := range []struct {
		args []string
		want string
	}{
		{[]string{"migrate", "up"}, "00006_daemon_role.sql"},
		{[]string{"migrate", "version"}, "15"},
		{[]string{"migrate", "down-to", "1"}, "down 00002"},
		{[]string{"migrate", "status"}, "pending"},
		{[]string{"migrate", "redo"}, "up 00001"},
		{[]string{"migrate", "reset"}, "down 00001"},
		{[]string{"migrate", "up"}, "up 00006"},
	} {
		r := tally(t, db.URL, step.args...)
		if r.code != 0 || !strings.Contains(r.stdout, step.want) {
			t.Fatalf("tally %s: want %q in stdout, got %+v", strings.Join(step.args, " "), step.want, r)
		}
	}
	if r := tally(t, db.URL, "migrate", "down-to", "x"); r.code != 2 || !strings.Contains(r.stderr, "not a migration version") {
		t.Fatalf("down-to x: %+v", r)
	}
}
