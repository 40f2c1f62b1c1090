package audit_test

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"tally/audit"
	"tally/vote"
)

// exampleDefinition is the example of docs/audit.md, "The definition
// leaf".
var exampleDefinition = func() audit.Definition {
	closes := time.Date(2026, 3, 1, 13, 0, 0, 0, time.UTC)
	return audit.Definition{PollID: "lunch", Title: "Lunch?", OpensAt: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
		ClosesAt: &closes, Choices: []string{"soup", "salad"}}
}()

// The example's bytes and hash are those docs/audit.md gives, and the
// eligible list's hash is the one it gives for p-7 and p-8.
func TestDefinitionEncoding(t *testing.T) {
	b, err := audit.EncodeDefinition(nil, exampleDefinition)
	if err != nil {
		t.Fatal(err)
	}
	const want = "02 056c756e6368 00064c756e63683f 00064bf535af1000 0100064bf60c42b400 00 0002 04736f7570 0573616c6164"
	if got := hex.EncodeToString(b); got != strings.ReplaceAll(want, " ", "") {
		t.Fatalf("encoding %s, want %s", got, want)
	}
	h, _ := audit.DefinitionHash(exampleDefinition)
	if got := hex.EncodeToString(h[:]); got != "262f3dd18584ce306f1c4bd5fa1b00bb8828cddde88db3652c84344e6113a31a" {
		t.Fatalf("leaf hash %s", got)
	}
	e := audit.EligibleListHash([]string{"p-8", "p-7", "p-8"})
	if got := hex.EncodeToString(e[:]); got != "bc9e0e736c717ee924b2ba01a004dba8d023b4a76271e88473f955eb3a5115f0" {
		t.Fatalf("eligible list hash %s", got)
	}
	back, err := audit.DecodeDefinition(b)
	if err != nil || back.Title != "Lunch?" || !back.ClosesAt.Equal(*exampleDefinition.ClosesAt) || strings.Join(back.Choices, ",") != "soup,salad" {
		t.Fatalf("decoded %+v (%v)", back, err)
	}
	// A vote leaf is not a definition, nor is a definition cut short.
	if _, err := audit.DecodeDefinition(b[:len(b)-1]); err == nil {
		t.Fatal("a definition cut short was decoded")
	}
	if _, err := audit.DecodeDefinition(append([]byte{1}, b[1:]...)); err == nil {
		t.Fatal("a version 1 leaf was decoded as a definition")
	}
}

// Check refuses what no definition leaf may hold.
func TestDefinitionCheck(t *testing.T) {
	for name, edit := range map[string]func(d *audit.Definition){
		"an invalid poll id":   func(d *audit.Definition) { d.PollID = "a b" },
		"an empty title":       func(d *audit.Definition) { d.Title = "" },
		"a title not UTF-8":    func(d *audit.Definition) { d.Title = "\xff" },
		"a title too long":     func(d *audit.Definition) { d.Title = strings.Repeat("x", 1<<16) },
		"no opening":           func(d *audit.Definition) { d.OpensAt = time.Time{} },
		"closing before":       func(d *audit.Definition) { c := d.OpensAt.Add(-time.Second); d.ClosesAt = &c },
		"no choice":            func(d *audit.Definition) { d.Choices = nil },
		"a choice twice":       func(d *audit.Definition) { d.Choices = []string{"a", "a"} },
		"an invalid choice id": func(d *audit.Definition) { d.Choices = []string{"a/b"} },
	} {
		d := exampleDefinition
		edit(&d)
		if _, err := audit.EncodeDefinition(nil, d); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
}

// A vote is taken when its choice is offered and it was received in the
// window: from opening, up to but not at closing.
func TestDefinitionRefuses(t *testing.T) {
	d := exampleDefinition
	for _, tc := range []struct {
		cand string
		at   time.Time
		want string
	}{
		{"soup", d.OpensAt, ""},
		{"salad", d.ClosesAt.Add(-time.Microsecond), ""},
		{"stew", d.OpensAt, "does not offer"},
		{"soup", d.OpensAt.Add(-time.Microsecond), "before the poll opened"},
		{"soup", *d.ClosesAt, "once the poll had closed"},
	} {
		if got := d.Refuses(tc.cand, tc.at); tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%s at %s: %q, want %q", tc.cand, tc.at, got, tc.want)
		}
	}
	open := d
	open.ClosesAt = nil
	if got := open.Refuses("soup", d.ClosesAt.Add(time.Hour)); got != "" {
		t.Errorf("a poll open until closed refused a late vote: %s", got)
	}
}

// A later definition may only close the poll, or close it earlier.
func TestDefinitionFollows(t *testing.T) {
	first := exampleDefinition
	first.ClosesAt = nil
	earlier := exampleDefinition.ClosesAt.Add(-time.Minute)
	hash := audit.EligibleListHash([]string{"p-7"})
	for _, tc := range []struct {
		name, field string
		prev        audit.Definition
		edit        func(d *audit.Definition)
	}{
		{"closed", "", first, func(d *audit.Definition) {}},
		{"closed earlier", "", exampleDefinition, func(d *audit.Definition) { d.ClosesAt = &earlier }},
		{"the same again", "definition", exampleDefinition, func(d *audit.Definition) {}},
		{"the same again, open until closed", "definition", first, func(d *audit.Definition) { d.ClosesAt = nil }},
		{"reopened", "closes_at", exampleDefinition, func(d *audit.Definition) { d.ClosesAt = nil }},
		{"closed later", "closes_at", exampleDefinition, func(d *audit.Definition) { l := d.ClosesAt.Add(time.Minute); d.ClosesAt = &l }},
		{"a choice added", "choices", exampleDefinition, func(d *audit.Definition) { d.Choices = []string{"soup", "salad", "stew"} }},
		{"choices reordered", "choices", exampleDefinition, func(d *audit.Definition) { d.Choices = []string{"salad", "soup"} }},
		{"retitled", "title", exampleDefinition, func(d *audit.Definition) { d.Title = "Dinner?" }},
		{"opened earlier", "opens_at", exampleDefinition, func(d *audit.Definition) { d.OpensAt = d.OpensAt.Add(-time.Hour) }},
		{"restricted", "eligible_hash", exampleDefinition, func(d *audit.Definition) { d.EligibleHash = &hash }},
		{"another poll", "poll_id", exampleDefinition, func(d *audit.Definition) { d.PollID = "dinner" }},
	} {
		d := exampleDefinition
		d.Choices = append([]string(nil), d.Choices...)
		tc.edit(&d)
		if field, why := d.Follows(tc.prev); field != tc.field || (why == "") != (tc.field == "") {
			t.Errorf("%s: field %q (%s), want %q", tc.name, field, why, tc.field)
		}
	}
}

func FuzzDecodeDefinition(f *testing.F) {
	good, _ := audit.EncodeDefinition(nil, exampleDefinition)
	f.Add(good)
	f.Add([]byte{2})
	for _, r := range []vote.Rules{
		{Kind: vote.KindMultiple, MinChoices: 1, MaxChoices: 2, Answers: vote.AnswersFinal},
		{Kind: vote.KindApprove, Answers: vote.AnswersLatest},
		{Kind: vote.KindScore, MaxScore: 5, Budget: 6, Answers: vote.AnswersLatest},
		{Kind: vote.KindRanked, Answers: vote.AnswersFinal},
	} {
		d := exampleDefinition
		d.Rules = r
		b, _ := audit.EncodeDefinition(nil, d)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := audit.DecodeDefinition(b)
		if err != nil {
			return
		}
		again, err := audit.EncodeDefinition(nil, d)
		if err != nil {
			t.Fatalf("decoded definition %+v does not encode: %v", d, err)
		}
		if string(again) != string(b) {
			t.Fatalf("decode then encode changed the bytes:\n%x\n%x", b, again)
		}
	})
}

// A title's JSON text must decode alike in every reader: no byte that is
// not UTF-8, no escaped lone surrogate; a pair, and an escaped backslash
// before "ud800", are text like any other.
func TestCheckJSONString(t *testing.T) {
	for _, ok := range []string{`"Lunch?"`, `"\ud83c\udf5c"`, `"\\ud800"`, `"\u00e9 é \uFFFD �"`, `"\"\u0041"`} {
		if err := audit.CheckJSONString([]byte(ok)); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for bad, says := range map[string]string{
		`"\ud800"`:         "lone surrogate, \\ud800 without the low half",
		`"\ud83c\u0041"`:   "lone surrogate, \\ud83c",
		`"\udf5c"`:         "lone surrogate, \\udf5c without the high half",
		`"\\\ud800"`:       "lone surrogate",
		"\"Lunch\xff\"":    "byte 0xff",
		"\"\xed\xa0\x80\"": "byte 0xed",
	} {
		if err := audit.CheckJSONString([]byte(bad)); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: %v, want an error saying %q", bad, err, says)
		}
	}
}
