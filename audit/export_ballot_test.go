package audit_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"tally/audit"
	"tally/vote"
)

// The lines of docs/audit.md's examples with rules: a ballot's vote and
// a definition with a ballot and answers, byte for byte, read back as
// the rows they were written from.
func TestBallotLinesBytes(t *testing.T) {
	received := exampleBallotLeaf.ReceivedAt
	leaf := int64(0)
	for _, tc := range []struct {
		row  audit.ExportRow
		want string
	}{
		{audit.ExportRow{Seq: 43, EventID: "e-2", PollID: "lunch", Ballot: `{"salad":2,"soup":3}`, PrincipalID: "p-7", ReceivedAt: received,
			RecordedAt: received.Add(time.Second)},
			`{"seq":43,"event_id":"e-2","poll_id":"lunch","ballot":{"salad":2,"soup":3},"principal_id":"p-7","received_at":"2026-03-01T12:00:00.123456Z","recorded_at":"2026-03-01T12:00:01.123456Z"}`},
		{audit.ExportRow{EventID: "e", PollID: "p", Ballot: `["c","a"]`, PrincipalID: "u"},
			`{"event_id":"e","poll_id":"p","ballot":["c","a"],"principal_id":"u"}`},
		{audit.ExportRow{PollID: "lunch", RecordedAt: time.Date(2026, 3, 1, 11, 59, 0, 0, time.UTC), LeafIndex: &leaf, Definition: &exampleRulesDefinition},
			`{"kind":"definition","poll_id":"lunch","title":"Lunch?","opens_at":"2026-03-01T12:00:00.000000Z","closes_at":"2026-03-01T13:00:00.000000Z",` +
				`"choices":["soup","salad"],"ballot":{"kind":"score","max_score":5,"budget":6},"answers":"latest","recorded_at":"2026-03-01T11:59:00.000000Z","leaf_index":0}`},
		{defRow(vote.Rules{Kind: vote.KindMultiple, MinChoices: 0, MaxChoices: 2, Answers: vote.AnswersFinal}),
			`{"kind":"definition","poll_id":"lunch","title":"Lunch?","opens_at":"2026-03-01T12:00:00.000000Z","closes_at":"2026-03-01T13:00:00.000000Z",` +
				`"choices":["soup","salad"],"ballot":{"kind":"multiple","min_choices":0,"max_choices":2},"answers":"final"}`},
		{defRow(vote.Rules{Kind: vote.KindScore, MaxScore: 9, Answers: vote.AnswersFinal}),
			`{"kind":"definition","poll_id":"lunch","title":"Lunch?","opens_at":"2026-03-01T12:00:00.000000Z","closes_at":"2026-03-01T13:00:00.000000Z",` +
				`"choices":["soup","salad"],"ballot":{"kind":"score","max_score":9},"answers":"final"}`},
		{defRow(vote.Rules{Kind: vote.KindRanked, Answers: vote.AnswersLatest}),
			`{"kind":"definition","poll_id":"lunch","title":"Lunch?","opens_at":"2026-03-01T12:00:00.000000Z","closes_at":"2026-03-01T13:00:00.000000Z",` +
				`"choices":["soup","salad"],"ballot":{"kind":"ranked"},"answers":"latest"}`},
		{defRow(vote.Rules{Kind: vote.KindSingle, Answers: vote.AnswersLatest}),
			`{"kind":"definition","poll_id":"lunch","title":"Lunch?","opens_at":"2026-03-01T12:00:00.000000Z","closes_at":"2026-03-01T13:00:00.000000Z",` +
				`"choices":["soup","salad"],"ballot":{"kind":"single"},"answers":"latest"}`},
		{defRow(vote.Single),
			`{"kind":"definition","poll_id":"lunch","title":"Lunch?","opens_at":"2026-03-01T12:00:00.000000Z","closes_at":"2026-03-01T13:00:00.000000Z",` +
				`"choices":["soup","salad"]}`},
	} {
		line := audit.AppendExportLine(nil, tc.row)
		if string(line) != tc.want+"\n" {
			t.Errorf("line\n got %s want %s", line, tc.want)
			continue
		}
		back, err := audit.ParseExportLine(line)
		if err != nil {
			t.Errorf("%s: refused: %v", line, err)
			continue
		}
		want := tc.row
		if want.Definition != nil && want.Definition.Rules.IsDefault() {
			d := *want.Definition
			d.Rules = vote.Rules{} // a line without rules reads as the zero rules
			want.Definition = &d
		}
		if !reflect.DeepEqual(back, want) && !sameRow(back, want) || back.Ballot != want.Ballot {
			t.Errorf("%s: read back %+v, want %+v", line, back, want)
		}
	}
}

func defRow(r vote.Rules) audit.ExportRow {
	d := exampleDefinition
	d.Rules = r
	return audit.ExportRow{PollID: d.PollID, Definition: &d}
}

// The strict reading of ballots: a vote's ballot exactly its canonical
// form, a definition's ballot and answers together, each key known.
func TestParseBallotLinesStrict(t *testing.T) {
	const ids = `"event_id":"e","poll_id":"p","principal_id":"u"`
	const def = `"kind":"definition","poll_id":"p","title":"T","opens_at":"2026-12-02T07:00:00.000000Z","choices":["a","b","c"]`
	for _, tc := range []struct{ name, line, says string }{
		{"a ballot with a space", `{` + ids + `,"ballot":["a", "b"]}`, `as a multiple ballot it is written "[\"a\",\"b\"]"`},
		{"an object out of order", `{` + ids + `,"ballot":{"b":1,"a":2}}`, `as a score ballot it is written "{\"a\":2,\"b\":1}"`},
		{"a score as 1.0", `{` + ids + `,"ballot":{"a":1.0}}`, "no ballot in canonical form"},
		{"a ballot that is a string", `{` + ids + `,"ballot":"a"}`, "carries candidate_id instead"},
		{"a null ballot", `{` + ids + `,"ballot":null}`, "an array or an object"},
		{"an approve mark in capitals", `{` + ids + `,"ballot":{"a":"Yes"}}`, "no ballot in canonical form"},
		{"both candidate and ballot", `{` + ids + `,"candidate_id":"a","ballot":["a"]}`, "both candidate_id and ballot"},
		{"neither", `{` + ids + `}`, `"candidate_id" is missing or empty, and there is no ballot`},
		{"ballot twice", `{` + ids + `,"ballot":["a"],"ballot":["b"]}`, `field "ballot" is given twice`},
		{"a ballot without answers", `{` + def + `,"ballot":{"kind":"ranked"}}`, `carries "ballot" and "answers" together`},
		{"answers without a ballot", `{` + def + `,"answers":"latest"}`, `carries "ballot" and "answers" together`},
		{"the default rules written out", `{` + def + `,"ballot":{"kind":"single"},"answers":"final"}`, "leaves both out"},
		{"an unknown key in the ballot", `{` + def + `,"ballot":{"kind":"ranked","Max_Score":3},"answers":"final"}`, `unknown key "Max_Score"`},
		{"a key twice in the ballot", `{` + def + `,"ballot":{"kind":"ranked","kind":"score"},"answers":"final"}`, `"kind" is given twice`},
		{"a parameter of another kind", `{` + def + `,"ballot":{"kind":"ranked","max_score":3},"answers":"final"}`, "max_score is a parameter of score ballots"},
		{"multiple without min_choices", `{` + def + `,"ballot":{"kind":"multiple","max_choices":2},"answers":"final"}`, `both "min_choices" and "max_choices"`},
		{"a parameter as a string", `{` + def + `,"ballot":{"kind":"score","max_score":"3"},"answers":"final"}`, "a whole number"},
		{"a parameter not whole", `{` + def + `,"ballot":{"kind":"score","max_score":3.0},"answers":"final"}`, "a whole number"},
		{"budget 0", `{` + def + `,"ballot":{"kind":"score","max_score":3,"budget":0},"answers":"final"}`, "budget is 0"},
		{"an unknown kind", `{` + def + `,"ballot":{"kind":"borda"},"answers":"final"}`, `ballot kind "borda" is not known`},
		{"a ballot that is not an object", `{` + def + `,"ballot":"ranked","answers":"final"}`, "must be an object"},
		{"an unknown answers", `{` + def + `,"ballot":{"kind":"ranked"},"answers":"last"}`, `answers "last" is not known`},
		{"answers not a string", `{` + def + `,"ballot":{"kind":"ranked"},"answers":1}`, `"answers" must be a string`},
		{"max_choices over the choices", `{` + def + `,"ballot":{"kind":"multiple","min_choices":1,"max_choices":4},"answers":"final"}`, "more than the poll's 3 choices"},
	} {
		if _, err := audit.ParseExportLine([]byte(tc.line)); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.says)
		}
	}
	for _, ok := range []string{
		`{` + ids + `,"ballot":[]}`,
		`{` + ids + `,"ballot":{}}`,
		`{` + ids + `,"ballot":["c","a"]}`,
		`{` + ids + `,"ballot":{"a":"abstain","b":"yes"}}`,
		`{ ` + ids + ` , "ballot" : ["a","b"] }`, // white space around the value is JSON's, not the ballot's
		`{` + def + `,"answers":"latest","ballot":{"max_choices":2,"kind":"multiple","min_choices":0}}`,
	} {
		if _, err := audit.ParseExportLine([]byte(ok)); err != nil {
			t.Errorf("%s: refused: %v", ok, err)
		}
	}
}
