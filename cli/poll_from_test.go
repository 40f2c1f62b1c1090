package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"tally/internal/testenv"
)

// TestPollCreateFrom: tally poll create --from FILE makes the polls of
// its JSON lines and reports each line as POST /v1/polls answers its poll
// (created, exists as asked, refused with why), exiting 1 when one was
// refused; run again it makes nothing. Flags of one poll beside --from
// are refused.
func TestPollCreateFrom(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	file := filepath.Join(t.TempDir(), "polls.jsonl")
	lines := `{"poll_id":"a","title":"A","choices":["x","y"]}
{"poll_id":"b","title":"B","choices":["x","y","z"],"ballot":{"kind":"ranked"},"eligible":["u1","u2"]}

{"poll_id":"a","title":"Another A","choices":["x","y"]}
{"poll_id":"c","title":"C"}
{"poll_id":"d","title":"D","choices":["x"],"colour":"red"}
not json
`
	if err := os.WriteFile(file, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	r := tally(t, db.URL, "poll", "create", "--from", file)
	want := []string{
		"1 a created", "2 b created", `4 a refused: poll a already exists with another title`,
		`5 c refused: create poll c: invalid argument: give at least one choice`, `6 d refused: the body has the key "colour", which is not one of the route's`,
		"7 - refused: the body is not valid JSON at byte 2",
	}
	if r.code != 1 {
		t.Fatalf("poll create --from with refused lines: %+v, want exit 1", r)
	}
	got := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(got) != len(want) {
		t.Fatalf("%d lines reported, want %d:\n%s", len(got), len(want), r.stdout)
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("line %d: %q, want %q...", i, got[i], w)
		}
	}
	if !strings.Contains(r.stderr, "2 polls created, 0 existed as asked, 4 refused") {
		t.Errorf("summary: %q", r.stderr)
	}
	if r := tally(t, db.URL, "poll", "show", "b", "--format", "json"); r.code != 0 || !strings.Contains(r.stdout, `"ranked"`) {
		t.Fatalf("poll show b: %+v", r)
	}
	good := filepath.Join(t.TempDir(), "good.jsonl")
	if err := os.WriteFile(good, []byte(strings.Join(strings.SplitN(lines, "\n", 3)[:2], "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := tally(t, db.URL, "poll", "create", "--from", good); r.code != 0 || r.stdout != "1 a exists\n2 b exists\n" {
		t.Fatalf("poll create --from again: %+v", r)
	}
	if r := tally(t, db.URL, "poll", "create", "--from", good, "--title", "T"); r.code != 2 || !strings.Contains(r.stderr, "leave --title out") {
		t.Fatalf("poll create --from with --title: %+v", r)
	}
	if r := tally(t, db.URL, "poll", "create", "e"); r.code != 2 || !strings.Contains(r.stderr, "--title") {
		t.Fatalf("poll create without --title: %+v", r)
	}
}

// TestPollCreateFromRate makes 2,000 polls of 3 choices from a file and
// reports the rate (go test -v shows the command's summary).
func TestPollCreateFromRate(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	file := filepath.Join(t.TempDir(), "polls.jsonl")
	var sb strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&sb, `{"poll_id":"q%d","title":"Lunch?","choices":["pizza","sushi","tacos"]}`+"\n", i)
	}
	if err := os.WriteFile(file, []byte(sb.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	r := tally(t, db.URL, "poll", "create", "--from", file)
	if r.code != 0 || !regexp.MustCompile(`^2000 polls created`).MatchString(r.stderr) {
		t.Fatalf("poll create --from: code %d, stderr %q", r.code, r.stderr)
	}
	t.Log(strings.TrimSpace(r.stderr))
}
