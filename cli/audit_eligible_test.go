package cli

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tally/audit"
)

// TestAuditVerifyEligible: --eligible POLL=FILE checks a restricted
// poll's votes against its list, once the list is the one its definition
// commits; a list that is not, or a flag or file that cannot be read,
// says so.
func TestAuditVerifyEligible(t *testing.T) {
	t.Parallel()
	f := writeAuditFiles(t)
	opens := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	hash := audit.EligibleListHash([]string{"alice", "bob", "carol"})
	def := audit.Definition{PollID: "team", Title: "Thursdays?", OpensAt: opens, EligibleHash: &hash, Choices: []string{"yes", "no"}}
	var export bytes.Buffer
	enc := json.NewEncoder(&export)
	rows := []audit.ExportRow{{PollID: "team", Definition: &def}}
	for i, p := range []string{"alice", "bob"} {
		rows = append(rows, audit.ExportRow{Seq: int64(i + 1), EventID: "e-" + p, PollID: "team", CandidateID: "yes", PrincipalID: p,
			ReceivedAt: opens.Add(time.Minute), RecordedAt: opens.Add(2 * time.Minute)})
	}
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	path := func(name, text string) string {
		p := filepath.Join(dir, name)
		write(t, p, text)
		return p
	}
	exp, cps := path("team.jsonl", export.String()), path("none.jsonl", "")
	verify := func(extra ...string) run {
		return offline(t, "", append([]string{"audit", "verify", "--export", exp, "--checkpoints", cps, "--key", f.key}, extra...)...)
	}
	if r := verify("--eligible", "team="+path("list", "carol\nbob\nalice\n")); r.code != ExitOK ||
		!strings.Contains(r.stdout, "the votes of 1 restricted polls are each of a principal on the eligible list given") {
		t.Fatalf("the poll's list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := verify(); r.code != ExitOK || strings.Contains(r.stdout, "restricted polls") {
		t.Fatalf("no list: exit %d\n%s%s; want OK without the eligibility sentence", r.code, r.stdout, r.stderr)
	}
	if r := verify("--eligible", "team="+path("short", "alice\n")); r.code != ExitCheck || !strings.Contains(r.stdout, "field eligible_hash") {
		t.Fatalf("a list that is not the poll's: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for name, flag := range map[string]string{
		"no file":        "team",
		"a bad poll id":  "te am=" + path("l2", "alice\n"),
		"a missing file": "team=" + filepath.Join(dir, "absent"),
		"a bad id":       "team=" + path("l3", "alice\nbad id\n"),
		"an absent poll": "gone=" + path("l4", "alice\n"),
	} {
		if r := verify("--eligible", flag); r.code != ExitError || r.stderr == "" {
			t.Errorf("%s (--eligible %s): exit %d, stderr %q; want 2 and why", name, flag, r.code, r.stderr)
		}
	}
}
