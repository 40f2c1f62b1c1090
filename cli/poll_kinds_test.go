package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"tally/internal/testenv"
	"tally/vote"
)

// tally poll create --kind and its parameters make the poll's rules,
// poll show says them, and a definition that makes no sense is refused
// before connecting, naming the flag.
func TestPollCreateKinds(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	for _, tc := range []struct {
		args []string
		want vote.Rules
		show string // in poll show's text
	}{
		{[]string{"--kind", "multiple", "--max-choices", "2"}, vote.Rules{Kind: vote.KindMultiple, MinChoices: 1, MaxChoices: 2, Answers: vote.AnswersFinal},
			"multiple, 1 to 2 choices, answers final"},
		{[]string{"--kind", "score", "--max-score", "5", "--budget", "8", "--answers", "latest"},
			vote.Rules{Kind: vote.KindScore, MaxScore: 5, Budget: 8, Answers: vote.AnswersLatest}, "SCORE"},
		{[]string{"--kind", "ranked"}, vote.Rules{Kind: vote.KindRanked, Answers: vote.AnswersFinal}, "Condorcet winner: none"},
		{[]string{"--kind", "approve"}, vote.Rules{Kind: vote.KindApprove, Answers: vote.AnswersFinal}, "ABSTAIN"},
	} {
		id := "p" + tc.args[1]
		args := append([]string{"poll", "create", id, "--title", "T", "--choice", "a", "--choice", "b", "--choice", "c"}, tc.args...)
		if r := tally(t, db.URL, args...); r.code != 0 {
			t.Fatalf("%v: %+v", args, r)
		}
		if r := tally(t, db.URL, args...); r.code != 0 || !strings.Contains(r.stderr, "exists already") {
			t.Fatalf("%v again: %+v", args, r)
		}
		r := tally(t, db.URL, "poll", "show", id, "--format", "json")
		var p pollJSON
		if err := json.Unmarshal([]byte(r.stdout), &p); err != nil {
			t.Fatalf("poll show %s: %+v (%v)", id, r, err)
		}
		got, err := vote.NewRules(vote.Spec{Kind: p.Ballot.Kind, MinChoices: p.Ballot.MinChoices, MaxChoices: p.Ballot.MaxChoices,
			MaxScore: p.Ballot.MaxScore, Budget: p.Ballot.Budget, Answers: string(p.Answers)}, 3)
		if err != nil || got != tc.want {
			t.Fatalf("poll show %s: rules %+v (%v), want %+v", id, got, err, tc.want)
		}
		if r := tally(t, db.URL, "poll", "show", id); !strings.Contains(r.stdout, tc.show) {
			t.Fatalf("poll show %s: %q lacks %q", id, r.stdout, tc.show)
		}
	}
	// Another kind for an existing poll is a conflict naming the ballot.
	r := tally(t, db.URL, "poll", "create", "pranked", "--title", "T", "--choice", "a", "--choice", "b", "--choice", "c", "--kind", "approve")
	if r.code == 0 || !strings.Contains(r.stderr, "another ballot") {
		t.Fatalf("a poll again with another kind: %+v", r)
	}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--kind", "borda"}, "--kind: ballot kind \"borda\" is not known"},
		{[]string{"--kind", "multiple", "--min-choices", "3", "--max-choices", "2"}, "--min-choices: min_choices (3) is above max_choices (2)"},
		{[]string{"--kind", "score"}, "--max-score: a score ballot needs max_score"},
		{[]string{"--kind", "score", "--max-score", "5", "--budget", "0"}, "--budget: budget is 0"},
		{[]string{"--max-score", "5"}, "--max-score: max_score is a parameter of score ballots"},
		{[]string{"--answers", "first"}, "--answers: answers \"first\" is not known"},
	} {
		args := append([]string{"poll", "create", "bad", "--title", "T", "--choice", "a", "--choice", "b",
			"--database-url", "postgres://postgres@127.0.0.1:1/none"}, tc.args...)
		if r := tallyWith(t, args...); r.code != 2 || !strings.Contains(r.stderr, tc.says) {
			t.Errorf("%v: %+v, want exit 2 saying %q", tc.args, r, tc.says)
		}
	}
}
