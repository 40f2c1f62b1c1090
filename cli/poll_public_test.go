package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"tally/internal/testenv"
)

// tally poll create --public-results makes a poll whose results anyone may
// see; poll show says so, and a poll made without it is not public.
func TestPollCreatePublicResults(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	if r := tally(t, db.URL, "poll", "create", "open", "--title", "T", "--choice", "a", "--public-results"); r.code != 0 {
		t.Fatalf("poll create --public-results: %+v", r)
	}
	if r := tally(t, db.URL, "poll", "create", "closed", "--title", "T", "--choice", "a"); r.code != 0 {
		t.Fatalf("poll create: %+v", r)
	}
	for id, want := range map[string]bool{"open": true, "closed": false} {
		r := tally(t, db.URL, "poll", "show", id, "--format", "json")
		var p pollJSON
		if err := json.Unmarshal([]byte(r.stdout), &p); err != nil || r.code != 0 {
			t.Fatalf("poll show %s --format json: %+v (%v)", id, r, err)
		}
		if p.PublicResults != want {
			t.Errorf("poll %s: public_results %v, want %v", id, p.PublicResults, want)
		}
	}
	if r := tally(t, db.URL, "poll", "show", "open"); !strings.Contains(r.stdout, "results   public (intake's page /polls/open needs no token)") {
		t.Fatalf("poll show open does not say its results are public: %+v", r)
	}
}
