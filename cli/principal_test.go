package cli

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"tally/internal/testenv"
)

// tally principal list shows what add and revoke did, in both formats;
// revoking an unknown principal says how to find the known ones.
func TestPrincipalCommands(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	r := tally(t, db.URL, "principal", "add", "ci-bot")
	if r.code != 0 || !strings.Contains(r.stderr, "added principal ") {
		t.Fatalf("principal add: %+v", r)
	}
	id := regexp.MustCompile(`added principal (\S+) \(ci-bot\)`).FindStringSubmatch(r.stderr)
	if id == nil {
		t.Fatalf("principal add named no id: %q", r.stderr)
	}
	if r := tally(t, db.URL, "principal", "revoke", id[1]); r.code != 0 || r.stderr != "revoked principal "+id[1]+"\n" {
		t.Fatalf("principal revoke: %+v", r)
	}
	if r := tally(t, db.URL, "principal", "revoke", "nobody"); r.code != 2 || !strings.Contains(r.stderr, "no principal nobody (tally principal list shows them)") {
		t.Fatalf("revoke of an unknown principal: %+v", r)
	}
	r = tally(t, db.URL, "principal", "list")
	if r.code != 0 || !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(id[1])+`\s+ci-bot\s+\S+Z\s+\S+Z\s*$`).MatchString(r.stdout) {
		t.Fatalf("principal list after revoke: %+v; want the principal with its revocation time", r)
	}
	r = tally(t, db.URL, "principal", "list", "--format", "json")
	var ps []struct {
		ID        string  `json:"id"`
		Name      string  `json:"name"`
		RevokedAt *string `json:"revoked_at"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &ps); err != nil || r.code != 0 {
		t.Fatalf("principal list --format json: %+v (%v)", r, err)
	}
	if len(ps) != 1 || ps[0].ID != id[1] || ps[0].Name != "ci-bot" || ps[0].RevokedAt == nil {
		t.Fatalf("principal list --format json: %+v, want ci-bot revoked", ps)
	}
	if r := tally(t, db.URL, "principal", "add"); r.code != 2 || !strings.Contains(r.stderr, "give the principal's NAME") {
		t.Fatalf("principal add without a name: %+v", r)
	}
}
