package cli

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"tally/internal/testenv"
)

// tally poll create takes its times and eligible principals from the
// flags, and refuses a time that is not RFC 3339 before connecting.
func TestPollCreateFlags(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	if r := tally(t, db.URL, "poll", "create", "p1", "--title", "T", "--choice", "a", "--choice", "b",
		"--opens-at", "2020-01-01T00:00:00Z", "--closes-at", "2999-01-01T00:00:00Z", "--eligible", "u1"); r.code != 0 {
		t.Fatalf("poll create: %+v", r)
	}
	r := tally(t, db.URL, "poll", "show", "p1", "--format", "json")
	var p pollJSON
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil || r.code != 0 {
		t.Fatalf("poll show --format json: %+v (%v)", r, err)
	}
	if p.State != "open" || p.OpensAt.Year() != 2020 || p.ClosesAt == nil || p.ClosesAt.Year() != 2999 ||
		len(p.Eligible) != 1 || p.Eligible[0] != "u1" || strings.Join(p.Choices, ",") != "a,b" || p.Results == nil {
		t.Fatalf("poll show: %+v", p)
	}
	r = tally(t, db.URL, "poll", "list")
	if !regexp.MustCompile(`p1\s+open\s+2999-01-01T00:00:00Z\s+1 listed\s+a,b\s+T`).MatchString(r.stdout) {
		t.Fatalf("poll list: %+v", r)
	}
	// An unreachable database: the time is checked first.
	r = tallyWith(t, "poll", "create", "p2", "--title", "T", "--choice", "a", "--closes-at", "tomorrow",
		"--database-url", "postgres://postgres@127.0.0.1:1/none")
	if r.code != 2 || !strings.Contains(r.stderr, `--closes-at "tomorrow": want an RFC 3339 time`) {
		t.Fatalf("poll create --closes-at tomorrow: %+v", r)
	}
	// A time before 1970, which the audit refuses: exit 2 naming the flag.
	r = tallyWith(t, "poll", "create", "p2", "--title", "T", "--choice", "a", "--opens-at", "0001-01-01T00:00:00Z",
		"--database-url", "postgres://postgres@127.0.0.1:1/none")
	if r.code != 2 || !strings.Contains(r.stderr, `--opens-at "0001-01-01T00:00:00Z" is before 1970`) {
		t.Fatalf("poll create --opens-at 0001-01-01T00:00:00Z: %+v", r)
	}
	// A title that is not UTF-8 (a surrogate's bytes included): exit 2
	// naming --title, before connecting.
	for _, title := range []string{"Lunch \xff?", "Lunch \xed\xa0\x80?"} {
		r = tallyWith(t, "poll", "create", "p2", "--title", title, "--choice", "a", "--database-url", "postgres://postgres@127.0.0.1:1/none")
		if r.code != 2 || !strings.Contains(r.stderr, "--title") || !strings.Contains(r.stderr, "not UTF-8") {
			t.Fatalf("poll create --title %q: %+v", title, r)
		}
	}
	if r := tally(t, db.URL, "poll", "show", "nope"); r.code != 2 || !strings.Contains(r.stderr, "no poll nope") {
		t.Fatalf("poll show nope: %+v", r)
	}
}
