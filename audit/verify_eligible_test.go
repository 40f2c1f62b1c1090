package audit_test

import (
	"strings"
	"testing"
	"time"

	"tally/audit"
)

// restrictedExport is an export of poll team, restricted to alice, bob
// and carol, with a vote of each principal of voters, and of poll open,
// which takes anyone, with one vote.
func restrictedExport(t *testing.T, voters ...string) *strings.Reader {
	t.Helper()
	opens := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	hash := audit.EligibleListHash([]string{"alice", "bob", "carol"})
	team := audit.Definition{PollID: "team", Title: "Thursdays?", OpensAt: opens, EligibleHash: &hash, Choices: []string{"yes", "no"}}
	open := audit.Definition{PollID: "open", Title: "Lunch?", OpensAt: opens, Choices: []string{"pizza"}}
	rows := []audit.ExportRow{{PollID: "team", Definition: &team}, {PollID: "open", Definition: &open}}
	for i, v := range voters {
		rows = append(rows, audit.ExportRow{EventID: "e-" + v, PollID: "team", CandidateID: "yes", PrincipalID: v,
			ReceivedAt: opens.Add(time.Duration(i+1) * time.Minute)})
	}
	rows = append(rows, audit.ExportRow{EventID: "e-x", PollID: "open", CandidateID: "pizza", PrincipalID: "zed", ReceivedAt: opens.Add(time.Hour)})
	return strings.NewReader(exportFile(t, rows).String())
}

// TestVerifyEligible: the list given is checked against the hash the
// poll's definition commits, and each vote against the list.
func TestVerifyEligible(t *testing.T) {
	t.Parallel()
	list := func(poll string, ids ...string) []audit.EligibleList {
		return []audit.EligibleList{{PollID: poll, Principals: ids}}
	}
	for _, tc := range []struct {
		name     string
		voters   []string
		eligible []audit.EligibleList
		checked  bool
		want     []string // field: detail fragment of each discrepancy
	}{
		{"the list, in any order", []string{"alice", "bob"}, list("team", "carol", "alice", "bob", "bob"), true, nil},
		{"no list given: not checked", []string{"alice", "mallory"}, nil, false, nil},
		{"a vote of a principal off the list", []string{"alice", "mallory", "bob"}, list("team", "alice", "bob", "carol"), true,
			[]string{"principal_id: principal mallory is not on the poll's eligible list"}},
		{"a list that is not the poll's", []string{"alice", "mallory"}, list("team", "alice", "bob"), false,
			[]string{"eligible_hash: the eligible list given for the poll does not hash"}},
		{"a list for a poll that takes anyone", []string{"alice"}, list("open", "zed"), false,
			[]string{"eligible_hash: an eligible list was given for the poll, but this definition takes any principal"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := audit.Verify(restrictedExport(t, tc.voters...), audit.Inputs{Eligible: tc.eligible})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Discrepancies) != len(tc.want) {
				t.Fatalf("discrepancies %v, want %d: %v", rep.Discrepancies, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				field, detail, _ := strings.Cut(w, ": ")
				if d := rep.Discrepancies[i]; d.Field != field || !strings.Contains(d.Detail, detail) {
					t.Errorf("discrepancy %d: %v, want field %s and %q", i, d, field, detail)
				}
			}
			for _, p := range rep.Polls {
				if want := tc.checked && p.PollID == "team"; p.EligibleChecked != want {
					t.Errorf("poll %s: eligible_checked %v, want %v", p.PollID, p.EligibleChecked, want)
				}
			}
		})
	}
	if _, err := audit.Verify(restrictedExport(t, "alice"), audit.Inputs{Eligible: list("gone", "alice")}); err == nil ||
		!strings.Contains(err.Error(), "poll gone, which the export does not hold") {
		t.Fatalf("a list for a poll the export lacks: %v, want an error naming it", err)
	}
}

func TestReadEligible(t *testing.T) {
	t.Parallel()
	l, err := audit.ReadEligible("team", strings.NewReader("alice\n\n  bob  \r\ncarol"))
	if err != nil || strings.Join(l.Principals, ",") != "alice,bob,carol" || l.PollID != "team" {
		t.Fatalf("ReadEligible: %+v, %v", l, err)
	}
	if _, err := audit.ReadEligible("team", strings.NewReader("alice\nnot an id\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("a line that is no id: %v, want an error naming line 2", err)
	}
}
