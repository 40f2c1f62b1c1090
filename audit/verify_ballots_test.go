package audit_test

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"tally/audit"
	"tally/vote"
)

// ballotVote is one vote of a hand-made export: its principal, its
// ballot (or, for a single-choice poll, its candidate) and when intake
// received it, in minutes after the poll opened.
type ballotVote struct {
	principal, ballot string
	minute            int
}

var ballotOpens = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// ballotExport is a poll p of these rules and choices, open an hour: its
// definition at leaf 0, then votes, a vote whose ballot is an id being a
// vote of one choice (candidate_id).
func ballotExport(rules vote.Rules, choices []string, votes ...ballotVote) []audit.ExportRow {
	closes := ballotOpens.Add(time.Hour)
	d := &audit.Definition{PollID: "p", Title: "P?", OpensAt: ballotOpens, ClosesAt: &closes, Choices: choices, Rules: rules}
	rows := []audit.ExportRow{{PollID: "p", Definition: d}}
	for i, v := range votes {
		r := audit.ExportRow{EventID: fmt.Sprintf("e%d", i), PollID: "p", PrincipalID: v.principal, ReceivedAt: ballotOpens.Add(time.Duration(v.minute) * time.Minute)}
		if vote.ValidID(v.ballot) {
			r.CandidateID = v.ballot
		} else {
			r.Ballot = v.ballot
		}
		rows = append(rows, r)
	}
	return rows
}

func i64(n int64) *int64 { return &n }

// verifyBallots audits rows (no checkpoint) against results.
func verifyBallots(t failer, rows []audit.ExportRow, results []audit.PublishedResults) (audit.Report, error) {
	t.Helper()
	var b []byte
	for i, r := range rows {
		r.Seq = int64(i + 1)
		b = audit.AppendExportLine(b, r)
	}
	return verifyLegacy(bytes.NewReader(b), nil, nil, results)
}

var (
	abc       = []string{"a", "b", "c"}
	multiple2 = vote.Rules{Kind: vote.KindMultiple, MinChoices: 1, MaxChoices: 2, Answers: vote.AnswersFinal}
	approve   = vote.Rules{Kind: vote.KindApprove, Answers: vote.AnswersFinal}
	score5    = vote.Rules{Kind: vote.KindScore, MaxScore: 5, Budget: 6, Answers: vote.AnswersFinal}
	ranked    = vote.Rules{Kind: vote.KindRanked, Answers: vote.AnswersFinal}
)

func latest(r vote.Rules) vote.Rules { r.Answers = vote.AnswersLatest; return r }

// The recount of an honest export of each kind is the figures counted
// here by hand, and results that publish them verify.
func TestRecountKinds(t *testing.T) {
	for _, tc := range []struct {
		name      string
		rules     vote.Rules
		votes     []ballotVote
		ballots   int64
		tallies   []audit.Tally
		pairwise  map[string]map[string]int64
		condorcet string
	}{
		{"multiple", multiple2, []ballotVote{{"u1", `["a","b"]`, 1}, {"u2", `["b"]`, 2}, {"u3", `["a","c"]`, 3}}, 3,
			[]audit.Tally{{CandidateID: "a", Votes: 2}, {CandidateID: "b", Votes: 2}, {CandidateID: "c", Votes: 1}}, nil, ""},
		{"multiple, a choice with no vote listed", multiple2, []ballotVote{{"u1", `["a"]`, 1}}, 1,
			[]audit.Tally{{CandidateID: "a", Votes: 1}, {CandidateID: "b"}, {CandidateID: "c"}}, nil, ""},
		{"approve", approve, []ballotVote{{"u1", `{"a":"yes","b":"no"}`, 1}, {"u2", `{"a":"no","c":"abstain"}`, 2}, {"u3", `{"a":"yes"}`, 3}, {"u4", `{}`, 4}}, 4,
			[]audit.Tally{{CandidateID: "a", Votes: 2, Yes: i64(2), No: i64(1), Abstain: i64(0)}, {CandidateID: "b", Yes: i64(0), No: i64(1), Abstain: i64(0)},
				{CandidateID: "c", Yes: i64(0), No: i64(0), Abstain: i64(1)}}, nil, ""},
		{"score", score5, []ballotVote{{"u1", `{"a":3,"b":3}`, 1}, {"u2", `{"a":5}`, 2}, {"u3", `{"b":0,"c":1}`, 3}}, 3,
			[]audit.Tally{{CandidateID: "a", Votes: 2, Score: i64(8)}, {CandidateID: "b", Votes: 2, Score: i64(3)}, {CandidateID: "c", Votes: 1, Score: i64(1)}}, nil, ""},
		{"ranked, no Condorcet winner", ranked, []ballotVote{{"u1", `["a","b","c"]`, 1}, {"u2", `["b","a"]`, 2}, {"u3", `["c"]`, 3}}, 3,
			[]audit.Tally{{CandidateID: "a", Votes: 1, Borda: i64(3)}, {CandidateID: "b", Votes: 1, Borda: i64(3)}, {CandidateID: "c", Votes: 1, Borda: i64(2)}},
			map[string]map[string]int64{"a": {"b": 1, "c": 2}, "b": {"a": 1, "c": 2}, "c": {"a": 1, "b": 1}}, ""},
		{"ranked, a Condorcet winner", ranked, []ballotVote{{"u1", `["a","b","c"]`, 1}, {"u2", `["b","a"]`, 2}, {"u3", `["c"]`, 3}, {"u4", `["a"]`, 4}}, 4,
			[]audit.Tally{{CandidateID: "a", Votes: 2, Borda: i64(5)}, {CandidateID: "b", Votes: 1, Borda: i64(3)}, {CandidateID: "c", Votes: 1, Borda: i64(2)}},
			map[string]map[string]int64{"a": {"b": 2, "c": 3}, "b": {"a": 1, "c": 2}, "c": {"a": 1, "b": 1}}, "a"},
		{"multiple latest: the last ballot of each principal", latest(multiple2),
			[]ballotVote{{"u1", `["a"]`, 1}, {"u2", `["a"]`, 2}, {"u1", `["b","c"]`, 3}, {"u1", `["c"]`, 4}}, 2,
			[]audit.Tally{{CandidateID: "a", Votes: 1}, {CandidateID: "b"}, {CandidateID: "c", Votes: 1}}, nil, ""},
		{"ranked latest", latest(ranked), []ballotVote{{"u1", `["a","b"]`, 1}, {"u1", `["b","a"]`, 2}}, 1,
			[]audit.Tally{{CandidateID: "a", Borda: i64(1)}, {CandidateID: "b", Votes: 1, Borda: i64(2)}, {CandidateID: "c", Borda: i64(0)}},
			map[string]map[string]int64{"a": {"b": 0, "c": 1}, "b": {"a": 1, "c": 1}, "c": {"a": 0, "b": 0}}, "b"},
		{"single latest", vote.Rules{Kind: vote.KindSingle, Answers: vote.AnswersLatest}, []ballotVote{{"u1", "a", 1}, {"u2", "a", 2}, {"u1", "b", 3}}, 2,
			[]audit.Tally{{CandidateID: "a", Votes: 1}, {CandidateID: "b", Votes: 1}}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows := ballotExport(tc.rules, abc, tc.votes...)
			var total int64
			for _, tl := range tc.tallies {
				total += tl.Votes
			}
			pub := audit.PublishedResults{PollID: "p", Results: tc.tallies, Total: total, Ballots: &tc.ballots, Pairwise: tc.pairwise}
			if tc.rules.Kind == vote.KindRanked {
				pub.CondorcetWinner = &audit.Winner{ID: tc.condorcet}
			}
			rep, err := verifyBallots(t, rows, []audit.PublishedResults{pub})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.OK() {
				t.Fatalf("discrepancies in an honest export: %v", rep.Discrepancies)
			}
			p := rep.Polls[0]
			if p.Kind != tc.rules.Kind || p.Ballots != tc.ballots || !reflect.DeepEqual(p.Tallies, tc.tallies) || p.ResultsCompared != 1 {
				t.Fatalf("recount %s: %d ballots, %s, want %d ballots, %s", p.Kind, p.Ballots, tallyText(p.Tallies), tc.ballots, tallyText(tc.tallies))
			}
			if !reflect.DeepEqual(p.Pairwise, tc.pairwise) {
				t.Fatalf("pairwise %v, want %v", p.Pairwise, tc.pairwise)
			}
			if tc.rules.Kind == vote.KindRanked && (p.CondorcetWinner == nil || p.CondorcetWinner.ID != tc.condorcet) {
				t.Fatalf("Condorcet winner %v, want %q", p.CondorcetWinner, tc.condorcet)
			}
		})
	}
}

func tallyText(ts []audit.Tally) string {
	var b strings.Builder
	for _, t := range ts {
		fmt.Fprintf(&b, "%s:%d", t.CandidateID, t.Votes)
		for _, f := range []struct {
			n string
			v *int64
		}{{"yes", t.Yes}, {"no", t.No}, {"abstain", t.Abstain}, {"score", t.Score}, {"borda", t.Borda}} {
			if f.v != nil {
				fmt.Fprintf(&b, " %s=%d", f.n, *f.v)
			}
		}
		b.WriteString("; ")
	}
	return b.String()
}

// A vote its poll's definition does not take is a discrepancy naming the
// field; a ballot that breaks the poll's rules is not counted.
func TestRecountTampered(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rules   vote.Rules
		votes   []ballotVote
		field   string
		leaf    int64
		ballots int64 // counted
		says    string
	}{
		{"a ballot over budget", score5, []ballotVote{{"u1", `{"a":1}`, 1}, {"u2", `{"a":5,"b":2}`, 2}}, "ballot", 2, 1, "spends 7 points, over the poll's budget of 6"},
		{"a score over max_score", score5, []ballotVote{{"u1", `{"a":6}`, 1}}, "ballot", 1, 0, "above the poll's max_score 5"},
		{"a choice twice", multiple2, []ballotVote{{"u1", `["a","a"]`, 1}}, "ballot", 1, 0, "gives choice a twice"},
		{"a ranked choice twice", ranked, []ballotVote{{"u1", `["b","a","b"]`, 1}}, "ballot", 1, 0, "gives choice b twice"},
		{"too many choices", multiple2, []ballotVote{{"u1", `["a","b","c"]`, 1}}, "ballot", 1, 0, "at most 2 (max_choices)"},
		{"too few choices", multiple2, []ballotVote{{"u1", `[]`, 1}}, "ballot", 1, 0, "at least 1 (min_choices)"},
		{"no choice ranked", ranked, []ballotVote{{"u1", `[]`, 1}}, "ballot", 1, 0, "ranks no choice"},
		{"a choice not offered", approve, []ballotVote{{"u1", `{"z":"yes"}`, 1}}, "ballot", 1, 0, "names z, which the poll's definition in force does not offer"},
		{"the shape of another kind", approve, []ballotVote{{"u1", `["a"]`, 1}}, "ballot", 1, 0, "not a approve ballot in canonical form"},
		{"a multiple ballot out of order", multiple2, []ballotVote{{"u1", `["b","a"]`, 1}}, "ballot", 1, 0, "not a multiple ballot in canonical form"},
		{"a candidate in a ranked poll", ranked, []ballotVote{{"u1", "a", 1}}, "candidate_id", 1, 0, "its votes carry a ballot"},
		{"a ballot in a single poll", vote.Single, []ballotVote{{"u1", `["a"]`, 1}}, "ballot", 1, 0, "the poll is single-choice"},
		{"two ballots in a final poll", multiple2, []ballotVote{{"u1", `["a"]`, 1}, {"u1", `["b"]`, 2}}, "principal_id", 2, 2, "already answered this poll"},
		{"a ballot changed after the close of a latest poll", latest(ranked), []ballotVote{{"u1", `["a"]`, 1}, {"u1", `["b"]`, 61}}, "received_at", 2, 1, "once the poll had closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := verifyBallots(t, ballotExport(tc.rules, abc, tc.votes...), nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Discrepancies) != 1 {
				t.Fatalf("discrepancies %v, want one of field %s", rep.Discrepancies, tc.field)
			}
			d := rep.Discrepancies[0]
			if d.Field != tc.field || d.Leaves == nil || d.Leaves.First != tc.leaf || !strings.Contains(d.Detail, tc.says) {
				t.Fatalf("discrepancy %v, want field %s at leaf %d saying %q", d, tc.field, tc.leaf, tc.says)
			}
			if rep.Polls[0].Ballots != tc.ballots {
				t.Fatalf("%d ballots counted, want %d", rep.Polls[0].Ballots, tc.ballots)
			}
		})
	}
	// A ballot before any definition has nothing to be read against.
	rows := ballotExport(ranked, abc, ballotVote{"u1", `["a"]`, 1})[1:]
	rep, err := verifyBallots(t, rows, nil)
	if err != nil || len(rep.Discrepancies) != 1 || rep.Discrepancies[0].Field != "ballot" || rep.Polls[0].Ballots != 0 {
		t.Fatalf("a ballot without a definition: %v %v", rep.Discrepancies, err)
	}
}

// A latest poll's ballot changed after its close replaces the one
// before in the recount (the recount says what the log holds), so the
// honest results no longer match it either.
func TestRecountLatestChangedAfterClose(t *testing.T) {
	rows := ballotExport(latest(multiple2), abc, ballotVote{"u1", `["a"]`, 1}, ballotVote{"u2", `["b"]`, 2}, ballotVote{"u1", `["c"]`, 70})
	pub := audit.PublishedResults{PollID: "p", Total: 2, Ballots: i64(2), TreeSize: i64(3),
		Results: []audit.Tally{{CandidateID: "a", Votes: 1}, {CandidateID: "b", Votes: 1}}}
	all := pub
	all.TreeSize = nil
	rep, err := verifyBallots(t, rows, []audit.PublishedResults{pub, all})
	if err != nil {
		t.Fatal(err)
	}
	var fields []string
	for _, d := range rep.Discrepancies {
		fields = append(fields, d.Field)
	}
	// At size 3 (before the late ballot) the results hold; over the whole
	// export, a lost its vote to c.
	if want := []string{"received_at", "votes", "results"}; !slices.Equal(fields, want) {
		t.Fatalf("fields %q, want %q: %v", fields, want, rep.Discrepancies)
	}
}

// Published results of the wrong shape for their poll's kind are refused;
// figures that differ from the recount are discrepancies.
func TestCompareKindResults(t *testing.T) {
	rankedRows := ballotExport(ranked, []string{"a", "b"}, ballotVote{"u1", `["a","b"]`, 1}, ballotVote{"u2", `["a"]`, 2})
	honest := func() audit.PublishedResults {
		return audit.PublishedResults{PollID: "p", Total: 2, Ballots: i64(2),
			Results:         []audit.Tally{{CandidateID: "a", Votes: 2, Borda: i64(2)}, {CandidateID: "b", Borda: i64(0)}},
			Pairwise:        map[string]map[string]int64{"a": {"b": 2}, "b": {"a": 0}},
			CondorcetWinner: &audit.Winner{ID: "a"}}
	}
	for _, tc := range []struct {
		name  string
		edit  func(p *audit.PublishedResults)
		field string
		error string
	}{
		{"honest", func(p *audit.PublishedResults) {}, "", ""},
		{"no ballots", func(p *audit.PublishedResults) { p.Ballots = nil }, "", `lack "ballots"`},
		{"no borda", func(p *audit.PublishedResults) { p.Results[1].Borda = nil }, "", `lacks "borda"`},
		{"a score", func(p *audit.PublishedResults) { p.Results[0].Score = i64(1) }, "", `gives "score"`},
		{"no pairwise", func(p *audit.PublishedResults) { p.Pairwise = nil }, "", `lacks "pairwise"`},
		{"no condorcet_winner", func(p *audit.PublishedResults) { p.CondorcetWinner = nil }, "", `lacks "condorcet_winner"`},
		{"another ballots", func(p *audit.PublishedResults) { p.Ballots = i64(3) }, "ballots", ""},
		{"another borda", func(p *audit.PublishedResults) { p.Results[0].Borda = i64(3) }, "borda", ""},
		{"another pairwise", func(p *audit.PublishedResults) { p.Pairwise["b"]["a"] = 1 }, "pairwise", ""},
		{"a pairwise cell left out", func(p *audit.PublishedResults) { delete(p.Pairwise, "b") }, "pairwise", ""},
		{"a pairwise cell of no pair", func(p *audit.PublishedResults) { p.Pairwise["a"]["a"] = 0 }, "pairwise", ""},
		{"no Condorcet winner", func(p *audit.PublishedResults) { p.CondorcetWinner = &audit.Winner{} }, "condorcet_winner", ""},
	} {
		pub := honest()
		tc.edit(&pub)
		rep, err := verifyBallots(t, rankedRows, []audit.PublishedResults{pub})
		switch {
		case tc.error != "":
			if err == nil || !strings.Contains(err.Error(), tc.error) {
				t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.error)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.field == "" && !rep.OK() || tc.field != "" && (len(rep.Discrepancies) != 1 || rep.Discrepancies[0].Field != tc.field):
			t.Errorf("%s: discrepancies %v, want one of field %q", tc.name, rep.Discrepancies, tc.field)
		}
	}
	// Single-choice results may carry ballots, and are compared on it; no
	// figure of another kind.
	single := ballotExport(vote.Single, abc, ballotVote{"u1", "a", 1})
	for _, tc := range []struct {
		pub   audit.PublishedResults
		field string
		error string
	}{
		{audit.PublishedResults{PollID: "p", Total: 1, Results: []audit.Tally{{CandidateID: "a", Votes: 1}}}, "", ""},
		{audit.PublishedResults{PollID: "p", Total: 1, Ballots: i64(1), Results: []audit.Tally{{CandidateID: "a", Votes: 1}}}, "", ""},
		{audit.PublishedResults{PollID: "p", Total: 1, Ballots: i64(2), Results: []audit.Tally{{CandidateID: "a", Votes: 1}}}, "ballots", ""},
		{audit.PublishedResults{PollID: "p", Total: 1, Results: []audit.Tally{{CandidateID: "a", Votes: 1, Yes: i64(1)}}}, "", `gives "yes"`},
		{audit.PublishedResults{PollID: "p", Total: 1, Results: []audit.Tally{{CandidateID: "a", Votes: 1}}, CondorcetWinner: &audit.Winner{}}, "", `gives "condorcet_winner"`},
	} {
		rep, err := verifyBallots(t, single, []audit.PublishedResults{tc.pub})
		switch {
		case tc.error != "":
			if err == nil || !strings.Contains(err.Error(), tc.error) {
				t.Errorf("single %+v: error %v, want one saying %q", tc.pub, err, tc.error)
			}
		case err != nil:
			t.Errorf("single %+v: %v", tc.pub, err)
		case tc.field == "" && !rep.OK() || tc.field != "" && (len(rep.Discrepancies) != 1 || rep.Discrepancies[0].Field != tc.field):
			t.Errorf("single %+v: discrepancies %v, want field %q", tc.pub, rep.Discrepancies, tc.field)
		}
	}
}

// The results file of a ranked poll is read strictly, pairwise included.
func TestReadKindResults(t *testing.T) {
	good := `{"poll_id":"p","results":[{"candidate_id":"a","votes":2,"borda":2},{"candidate_id":"b","votes":0,"borda":0}],"total":2,"ballots":2,` +
		`"pairwise":{"a":{"b":2},"b":{"a":0}},"condorcet_winner":null,"tree_size":3}`
	res, err := audit.ReadResults(strings.NewReader(good + "\n"))
	if err != nil || len(res) != 1 || res[0].CondorcetWinner == nil || res[0].CondorcetWinner.ID != "" || *res[0].Ballots != 2 || res[0].Pairwise["a"]["b"] != 2 {
		t.Fatalf("read %+v (%v)", res, err)
	}
	for _, tc := range []struct{ name, line, says string }{
		{"a pairwise key twice", strings.Replace(good, `{"b":2}`, `{"b":2,"b":1}`, 1), `pairwise "a": key "b" is given twice`},
		{"a pairwise row twice", strings.Replace(good, `"b":{"a":0}`, `"a":{"b":0}`, 1), `pairwise: key "a" is given twice`},
		{"a figure spelt in capitals", strings.Replace(good, `"borda":2`, `"Borda":2`, 1), `key "borda" is spelt "Borda"`},
		{"a figure twice", strings.Replace(good, `"borda":2`, `"borda":2,"borda":3`, 1), `key "borda" is given twice`},
		{"a null pairwise", strings.Replace(good, `{"a":{"b":2},"b":{"a":0}}`, `null`, 1), "pairwise is null"},
		{"a winner that is no id", strings.Replace(good, `"condorcet_winner":null`, `"condorcet_winner":"a b"`, 1), "condorcet_winner is a choice id or null"},
		{"a figure that is a string", strings.Replace(good, `"borda":2`, `"borda":"2"`, 1), "borda"},
	} {
		if _, err := audit.ReadResults(strings.NewReader(tc.line + "\n")); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.says)
		}
	}
}

// The audit's recount of an honest log of random rules and random valid
// ballots, principals changing their ballots in a latest poll, equals
// package vote's Count of the ballots that count: the first of each
// principal in a final poll, the last in a latest one. Here, and only
// here, the audit is held to vote's Count, as a model.
func TestRecountAgreesWithVoteCount(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nChoices := rapid.IntRange(1, 6).Draw(t, "choices")
		choices := make([]string, nChoices)
		for i := range choices {
			choices[i] = fmt.Sprintf("c%d", i)
		}
		rules := genRules(t, nChoices)
		principals := rapid.IntRange(1, 5).Draw(t, "principals")
		var votes []ballotVote
		counts := map[string]vote.Ballot{} // the ballot that counts, by principal
		var order []string
		for i := range rapid.IntRange(0, 12).Draw(t, "votes") {
			who := fmt.Sprintf("u%d", rapid.IntRange(0, principals-1).Draw(t, "who"))
			if _, ok := counts[who]; ok && rules.Answers == vote.AnswersFinal {
				continue // an honest final log holds one ballot a principal
			}
			b := genValidBallot(t, rules, choices)
			if err := rules.Check(choices, b); err != nil {
				t.Fatalf("drew an invalid ballot %s: %v", b.Canonical(), err)
			}
			if _, ok := counts[who]; !ok {
				order = append(order, who)
			}
			counts[who] = b
			votes = append(votes, ballotVote{who, b.Canonical(), i})
		}
		model := vote.NewCount(rules.Kind, choices)
		for _, who := range order {
			model.Add(counts[who], 1)
		}
		rep, err := verifyBallots(t, ballotExport(rules, choices, votes...), nil)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK() {
			t.Fatalf("discrepancies in an honest log: %v", rep.Discrepancies)
		}
		got := rep.Polls[0]
		if got.Ballots != model.Ballots {
			t.Fatalf("%d ballots recounted, %d by the model", got.Ballots, model.Ballots)
		}
		byID := map[string]audit.Tally{}
		for _, tl := range got.Tallies {
			byID[tl.CandidateID] = tl
		}
		for i, c := range choices {
			f, tl := model.Figures[i], byID[c]
			want := vote.Figures{Votes: tl.Votes, Yes: deref(tl.Yes), No: deref(tl.No), Abstain: deref(tl.Abstain), Score: deref(tl.Score), Borda: deref(tl.Borda)}
			if f != want {
				t.Fatalf("choice %s: recount %+v, model %+v", c, want, f)
			}
			for j, d := range choices {
				if rules.Kind == vote.KindRanked && i != j && got.Pairwise[c][d] != model.Beats(i, j) {
					t.Fatalf("pairwise %s over %s: recount %d, model %d", c, d, got.Pairwise[c][d], model.Beats(i, j))
				}
			}
		}
		if rules.Kind == vote.KindRanked {
			w, _ := model.CondorcetWinner()
			if got.CondorcetWinner == nil || got.CondorcetWinner.ID != w {
				t.Fatalf("Condorcet winner %v, model %q", got.CondorcetWinner, w)
			}
		}
	})
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// genValidBallot draws a ballot of rules' kind that keeps its rules.
func genValidBallot(t *rapid.T, rules vote.Rules, choices []string) vote.Ballot {
	pick := rapid.Permutation(choices).Draw(t, "order")
	b := vote.Ballot{Kind: rules.Kind}
	switch rules.Kind {
	case vote.KindSingle:
		b.Choices = pick[:1]
	case vote.KindMultiple:
		b.Choices = pick[:rapid.IntRange(rules.MinChoices, rules.MaxChoices).Draw(t, "n")]
	case vote.KindRanked:
		b.Choices = pick[:rapid.IntRange(1, len(pick)).Draw(t, "n")]
	case vote.KindApprove:
		for _, c := range pick[:rapid.IntRange(0, len(pick)).Draw(t, "n")] {
			b.Marks = append(b.Marks, vote.Mark{Choice: c, Value: rapid.IntRange(0, 2).Draw(t, "mark")})
		}
	case vote.KindScore:
		left := rules.Budget
		for _, c := range pick[:rapid.IntRange(0, len(pick)).Draw(t, "n")] {
			hi := rules.MaxScore
			if rules.Budget > 0 {
				hi = min(hi, left)
			}
			v := rapid.IntRange(0, hi).Draw(t, "score")
			left -= v
			b.Marks = append(b.Marks, vote.Mark{Choice: c, Value: v})
		}
	}
	canon := b.Canonical()
	if rules.Kind != vote.KindSingle {
		var err error
		if b, err = vote.ParseBallot(rules.Kind, []byte(canon)); err != nil { // canonical order
			t.Fatalf("drew %s: %v", canon, err)
		}
	}
	return b
}
