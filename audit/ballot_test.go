package audit_test

import (
	"strings"
	"testing"
	"time"

	"tally/audit"
	"tally/vote"
)

// The audit's own reading of a ballot against its definition, on its
// own: each shape, each rule, each boundary, both sides.
func TestRefusesVote(t *testing.T) {
	at := ballotOpens.Add(time.Minute)
	def := func(r vote.Rules) audit.Definition {
		closes := ballotOpens.Add(time.Hour)
		return audit.Definition{PollID: "p", Title: "P?", OpensAt: ballotOpens, ClosesAt: &closes, Choices: []string{"a", "b", "c"}, Rules: r}
	}
	multi02 := vote.Rules{Kind: vote.KindMultiple, MinChoices: 0, MaxChoices: 2, Answers: vote.AnswersFinal}
	score3 := vote.Rules{Kind: vote.KindScore, MaxScore: 3, Answers: vote.AnswersFinal}
	for _, tc := range []struct {
		rules  vote.Rules
		ballot string
		field  string
		says   string
	}{
		{multi02, `[]`, "", ""},
		{multi02, `["a","b"]`, "", ""},
		{multi02, `["a","b","c"]`, "ballot", "at most 2"},
		{multiple2, `[]`, "ballot", "at least 1"},
		{multiple2, `["a"]`, "", ""},
		{multi02, `["a","a"]`, "ballot", "twice"},
		{multi02, `["b","a"]`, "ballot", "canonical"},
		{multi02, `["a" ]`, "ballot", "canonical"},
		{multi02, `["a",]`, "ballot", "canonical"},
		{multi02, `["a""b"]`, "ballot", "canonical"},
		{multi02, `[a]`, "ballot", "canonical"},
		{multi02, `{"a":1}`, "ballot", "canonical"},
		{multi02, `["d"]`, "ballot", "does not offer"},
		{ranked, `["c","a"]`, "", ""},
		{ranked, `["c","c"]`, "ballot", "twice"},
		{ranked, `[]`, "ballot", "ranks no choice"},
		{approve, `{}`, "", ""},
		{approve, `{"a":"yes","b":"no","c":"abstain"}`, "", ""},
		{approve, `{"b":"no","a":"yes"}`, "ballot", "canonical"},
		{approve, `{"a":"yes","a":"no"}`, "ballot", "canonical"},
		{approve, `{"a":"maybe"}`, "ballot", "canonical"},
		{approve, `{"a":1}`, "ballot", "canonical"},
		{approve, `{"a":"yes"`, "ballot", "canonical"},
		{score3, `{"a":3,"b":0}`, "", ""},
		{score3, `{"a":4}`, "ballot", "above the poll's max_score 3"},
		{score3, `{"a":03}`, "ballot", "canonical"},
		{score3, `{"a":-1}`, "ballot", "canonical"},
		{score3, `{"a":1.0}`, "ballot", "canonical"},
		{score3, `{"a":"1"}`, "ballot", "canonical"},
		{score3, `{"a":2147483648}`, "ballot", "canonical"},
		{score3, `{"a":12345678901}`, "ballot", "canonical"},
		{vote.Rules{Kind: vote.KindScore, MaxScore: 3, Budget: 4, Answers: vote.AnswersFinal}, `{"a":2,"b":2}`, "", ""},
		{vote.Rules{Kind: vote.KindScore, MaxScore: 3, Budget: 4, Answers: vote.AnswersFinal}, `{"a":2,"b":3}`, "ballot", "over the poll's budget of 4"},
		{vote.Rules{Kind: vote.KindScore, MaxScore: 3, Budget: 4, Answers: vote.AnswersFinal}, `{"a":2147483647}`, "ballot", "above the poll's max_score"},
		{vote.Single, "a", "", ""},
		{vote.Single, "d", "candidate_id", "does not offer"},
		{vote.Single, `["a"]`, "ballot", "single-choice"},
		{ranked, "a", "candidate_id", "its votes carry a ballot"},
	} {
		l := audit.Leaf{PollID: "p", PrincipalID: "u", ClientEventID: "e", ReceivedAt: at}
		if vote.ValidID(tc.ballot) {
			l.CandidateID = tc.ballot
		} else {
			l.Ballot = tc.ballot
		}
		field, why := def(tc.rules).RefusesVote(l)
		if field != tc.field || !strings.Contains(why, tc.says) {
			t.Errorf("%s ballot %s: %q %q, want field %q saying %q", tc.rules.Kind, tc.ballot, field, why, tc.field, tc.says)
		}
	}
	// The window holds for ballots as for votes of one choice: from the
	// opening on, up to the closing.
	d := def(ranked)
	for _, tc := range []struct {
		at    time.Time
		field string
	}{
		{ballotOpens.Add(-time.Microsecond), "received_at"}, {ballotOpens, ""},
		{ballotOpens.Add(time.Hour - time.Microsecond), ""}, {ballotOpens.Add(time.Hour), "received_at"},
	} {
		if field, why := d.RefusesVote(audit.Leaf{Ballot: `["a"]`, ReceivedAt: tc.at}); field != tc.field {
			t.Errorf("received at %s: %q %s, want %q", tc.at, field, why, tc.field)
		}
	}
}

// FuzzRefusesVote holds the audit's own reading of a ballot to package
// vote's (ParseCanonical, then Rules.Check), as a model: for any text and
// any kind, one takes the ballot exactly when the other does.
func FuzzRefusesVote(f *testing.F) {
	for _, s := range []string{`["a","b"]`, `["b","a"]`, `["a","a"]`, `[]`, `{}`, `{"a":"yes","c":"no"}`, `{"a":3,"b":0}`,
		`{"a":03}`, `{"a":4}`, `{"a":2147483648}`, `["a", "b"]`, `{"b":1,"a":1}`, `["d"]`} {
		for k := range len(vote.Kinds) {
			f.Add(s, uint8(k))
		}
	}
	rules := map[vote.Kind]vote.Rules{
		vote.KindSingle:   vote.Single,
		vote.KindMultiple: {Kind: vote.KindMultiple, MinChoices: 1, MaxChoices: 2, Answers: vote.AnswersFinal},
		vote.KindApprove:  {Kind: vote.KindApprove, Answers: vote.AnswersFinal},
		vote.KindScore:    {Kind: vote.KindScore, MaxScore: 3, Budget: 4, Answers: vote.AnswersFinal},
		vote.KindRanked:   {Kind: vote.KindRanked, Answers: vote.AnswersFinal},
	}
	choices := []string{"a", "b", "c"}
	f.Fuzz(func(t *testing.T, s string, k uint8) {
		r := rules[vote.Kinds[int(k)%len(vote.Kinds)]]
		d := audit.Definition{PollID: "p", Title: "P?", OpensAt: ballotOpens, Choices: choices, Rules: r}
		l := audit.Leaf{Ballot: s, ReceivedAt: ballotOpens}
		if vote.ValidID(s) {
			l = audit.Leaf{CandidateID: s, ReceivedAt: ballotOpens}
		}
		if r.Kind != vote.KindSingle && l.Ballot == "" || r.Kind == vote.KindSingle && l.Ballot != "" {
			return // a vote of the other form: no ballot of the kind to compare
		}
		field, why := d.RefusesVote(l)
		b, err := vote.ParseCanonical(r.Kind, s)
		if err == nil {
			err = r.Check(choices, b)
		}
		if (field == "") != (err == nil) {
			t.Fatalf("%s ballot %q: the audit says %q %q, package vote %v", r.Kind, s, field, why, err)
		}
	})
}
