package audit_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"tally/audit"
)

// TestExportLineBytes: a row's line is the one docs/audit.md specifies,
// byte for byte, whether written by AppendExportLine or by a json.Encoder,
// and reads back as the same row.
func TestExportLineBytes(t *testing.T) {
	leaf := int64(3)
	row := audit.ExportRow{Seq: 42, EventID: "e-1", PollID: "lunch", CandidateID: "soup", PrincipalID: "p_7",
		ReceivedAt: time.Date(2026, 12, 2, 7, 0, 0, 120000, time.FixedZone("CET", 3600)),
		RecordedAt: time.Date(2026, 12, 2, 6, 0, 1, 0, time.UTC), LeafIndex: &leaf}
	want := `{"seq":42,"event_id":"e-1","poll_id":"lunch","candidate_id":"soup","principal_id":"p_7",` +
		`"received_at":"2026-12-02T06:00:00.000120Z","recorded_at":"2026-12-02T06:00:01.000000Z","leaf_index":3}` + "\n"
	if got := string(audit.AppendExportLine(nil, row)); got != want {
		t.Fatalf("AppendExportLine:\n%s\nwant\n%s", got, want)
	}
	var b bytes.Buffer
	if err := json.NewEncoder(&b).Encode(row); err != nil || b.String() != want {
		t.Fatalf("json.Encoder: %q %v, want %q", b.String(), err, want)
	}
	back, err := audit.ParseExportLine([]byte(want))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := audit.ParseWritten([]byte(want)); !ok {
		t.Error("the line as export writes it is not read by the fast path")
	}
	if back.Seq != row.Seq || back.EventID != row.EventID || back.PollID != row.PollID || back.CandidateID != row.CandidateID ||
		back.PrincipalID != row.PrincipalID || !back.ReceivedAt.Equal(row.ReceivedAt) || !back.RecordedAt.Equal(row.RecordedAt) ||
		back.LeafIndex == nil || *back.LeafIndex != leaf {
		t.Fatalf("read back %+v, want %+v", back, row)
	}
	// Without the optional fields, they are left out.
	bare := audit.ExportRow{EventID: "e", PollID: "p", CandidateID: "c", PrincipalID: "u"}
	if got := string(audit.AppendExportLine(nil, bare)); got != `{"event_id":"e","poll_id":"p","candidate_id":"c","principal_id":"u"}`+"\n" {
		t.Fatalf("a row without optional fields: %s", got)
	}
}

// TestParseExportLineStrict: what encoding/json lets pass, the export's
// reading refuses, saying what is wrong.
func TestParseExportLineStrict(t *testing.T) {
	const ids = `"event_id":"e","poll_id":"p","candidate_id":"c","principal_id":"u"`
	const def = `"kind":"definition","poll_id":"p","title":"T","opens_at":"2026-12-02T07:00:00.000000Z","choices":["a"]`
	for _, tc := range []struct{ name, line, says string }{
		{"a key spelt in another case beside the key", `{` + ids + `,"Candidate_ID":"d"}`, `unknown field "Candidate_ID"`},
		{"a key only in another case", `{"EVENT_ID":"e","poll_id":"p","candidate_id":"c","principal_id":"u"}`, `unknown field "EVENT_ID"`},
		{"a duplicate key", `{` + ids + `,"candidate_id":"d"}`, `field "candidate_id" is given twice`},
		{"an unknown key", `{` + ids + `,"weight":2}`, `unknown field "weight"`},
		{"a vote's field in a definition", `{` + def + `,"candidate_id":"c"}`, `unknown field "candidate_id" in a definition line`},
		{"a kind this version does not know", `{"kind":"amendment","poll_id":"p"}`, `this version reads kind "definition" only`},
		{"a definition without choices", `{"kind":"definition","poll_id":"p","title":"T","opens_at":"2026-12-02T07:00:00.000000Z"}`, `field "choices" is missing`},
		{"a choice twice", `{"kind":"definition","poll_id":"p","title":"T","opens_at":"2026-12-02T07:00:00.000000Z","choices":["a","a"]}`, `choice "a" is given twice`},
		{"an eligible hash in capitals", `{` + def + `,"eligible_hash":"` + strings.Repeat("AB", 32) + `"}`, "64 lowercase hexadecimal digits"},
		{"closing before opening", `{` + def + `,"closes_at":"2026-12-01T07:00:00.000000Z"}`, "closes before it opens"},
		{"nanoseconds", `{` + ids + `,"received_at":"2026-12-02T07:00:00.123456789Z"}`, "with 9 fractional digits"},
		{"a time that is not one", `{` + ids + `,"received_at":"2026-12-02 07:00"}`, "RFC 3339"},
		{"seq 0", `{"seq":0,` + ids + `}`, "a seq is a whole number from 1"},
		{"a negative leaf index", `{` + ids + `,"leaf_index":-1}`, "a leaf index is a whole number from 0"},
		{"an invalid id", `{"event_id":"e/1","poll_id":"p","candidate_id":"c","principal_id":"u"}`, `field "event_id" is "e/1"`},
		{"two objects", `{` + ids + `}{}`, "data follows"},
	} {
		if _, err := audit.ParseExportLine([]byte(tc.line)); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.says)
		}
	}
	for _, ok := range []string{
		`{` + ids + `,"received_at":"2026-12-02T07:00:00.8654Z"}`, // fewer digits, as exports before six digits wrote
		`{` + ids + `,"received_at":"2026-12-02T08:00:00.123456+01:00"}`,
		`{` + ids + `,"leaf_index":null}`,
	} {
		if _, err := audit.ParseExportLine([]byte(ok)); err != nil {
			t.Errorf("%s: refused: %v", ok, err)
		}
	}
}

// sameRow reports whether a and b are the same row.
func sameRow(a, b audit.ExportRow) bool {
	return a.Seq == b.Seq && a.EventID == b.EventID && a.PollID == b.PollID && a.CandidateID == b.CandidateID && a.Ballot == b.Ballot &&
		a.PrincipalID == b.PrincipalID && a.ReceivedAt.Equal(b.ReceivedAt) && a.RecordedAt.Equal(b.RecordedAt) &&
		(a.LeafIndex == nil) == (b.LeafIndex == nil) && (a.LeafIndex == nil || *a.LeafIndex == *b.LeafIndex)
}

// FuzzParseExportLine: whatever the reading accepts writes back as a line
// it reads as the same row, and its fast path (a line as tally export
// writes it) reads the row its strict path does.
func FuzzParseExportLine(f *testing.F) {
	f.Add(`{"seq":1,"event_id":"e","poll_id":"p","candidate_id":"c","principal_id":"u","received_at":"2026-12-02T07:00:00.000001Z","leaf_index":0}`)
	f.Add(`{"event_id":"e","poll_id":"p","candidate_id":"c","principal_id":"u"}`)
	f.Add(`{"seq":42,"event_id":"e-1","poll_id":"lunch","candidate_id":"soup","principal_id":"p_7","received_at":"2026-12-02T06:00:00.000120Z","recorded_at":"2026-12-02T06:00:01.000000Z","leaf_index":3}`)
	f.Add(`{"kind":"definition","poll_id":"lunch","title":"Lunch?","opens_at":"2026-03-01T12:00:00.000000Z","closes_at":"2026-03-01T13:00:00.000000Z",` +
		`"eligible_hash":"bc9e0e736c717ee924b2ba01a004dba8d023b4a76271e88473f955eb3a5115f0","choices":["soup","salad"],"recorded_at":"2026-03-01T11:59:00.000000Z","leaf_index":0}`)
	f.Add(`{"seq":43,"event_id":"e-2","poll_id":"lunch","ballot":{"salad":2,"soup":3},"principal_id":"p-7","received_at":"2026-03-01T12:00:00.123456Z","leaf_index":1}`)
	f.Add(`{"event_id":"e","poll_id":"p","ballot":["c","a"],"principal_id":"u"}`)
	f.Add(`{"event_id":"e","poll_id":"p","ballot":{"a":"yes","b":"abstain"},"principal_id":"u"}`)
	f.Add(`{"event_id":"e","poll_id":"p","ballot":[ "a" ],"principal_id":"u"}`)
	f.Add(`{"kind":"definition","poll_id":"lunch","title":"Lunch?","opens_at":"2026-03-01T12:00:00.000000Z","choices":["soup","salad"],` +
		`"ballot":{"kind":"score","max_score":5,"budget":6},"answers":"latest","leaf_index":0}`)
	f.Add(`{"kind":"definition","poll_id":"p","title":"T","opens_at":"2026-03-01T12:00:00.000000Z","choices":["a","b"],` +
		`"ballot":{"kind":"multiple","min_choices":0,"max_choices":2},"answers":"final"}`)
	f.Fuzz(func(t *testing.T, line string) {
		r, err := audit.ParseExportLine([]byte(line))
		if err != nil {
			return
		}
		if w, ok := audit.ParseWritten([]byte(line)); ok {
			strict, err := audit.ParseStrict([]byte(line))
			if err != nil || !sameRow(w, strict) {
				t.Fatalf("%q: the fast path read %+v, the strict one %+v (%v)", line, w, strict, err)
			}
		}
		out := audit.AppendExportLine(nil, r)
		back, err := audit.ParseExportLine(out)
		if err != nil {
			t.Fatalf("%q read, its line %q refused: %v", line, out, err)
		}
		if again := audit.AppendExportLine(nil, back); !bytes.Equal(again, out) {
			t.Fatalf("%q: written %q, read and written again %q", line, out, again)
		}
	})
}

// TestParseExportLineTimes: times are RFC 3339 as the RFC spells them,
// not as Go's parser also takes them.
func TestParseExportLineTimes(t *testing.T) {
	line := func(at string) string {
		return `{"event_id":"e","poll_id":"p","candidate_id":"c","principal_id":"u","received_at":"` + at + `"}`
	}
	for _, bad := range []string{
		"2026-03-01T12:00:00,1234567Z", // a comma
		"2026-03-01T12:00:00,1Z",
		"2026-03-01T12:00:00+24:00", // offsets past 23:59
		"2026-03-01T12:00:00+00:60",
		"2026-03-01t12:00:00z",
	} {
		if _, err := audit.ParseExportLine([]byte(line(bad))); err == nil || !strings.Contains(err.Error(), "RFC 3339") {
			t.Errorf("%s: %v, want a refusal naming RFC 3339", bad, err)
		}
	}
	for _, old := range []string{"0001-01-01T00:00:00Z", "1969-12-31T23:59:59.999999Z", "1970-01-01T00:30:00+01:00"} {
		if _, err := audit.ParseExportLine([]byte(line(old))); err == nil || !strings.Contains(err.Error(), "before 1970-01-01T00:00:00Z") {
			t.Errorf("%s: %v, want a refusal of a time before 1970", old, err)
		}
	}
	for _, good := range []string{"2026-03-01T12:00:00Z", "2026-03-01T12:00:00.1Z", "2026-03-01T12:00:00.123456-23:59",
		"1970-01-01T00:00:00Z", "1970-01-01T01:00:00+01:00"} {
		if _, err := audit.ParseExportLine([]byte(line(good))); err != nil {
			t.Errorf("%s: refused: %v", good, err)
		}
	}
}

// A definition line is written in its one form and read back as it was,
// by the fast path's fallback; a title that needs escaping is escaped.
func TestDefinitionLineRoundTrip(t *testing.T) {
	opens := time.Date(2026, 12, 2, 7, 0, 0, 123456000, time.UTC)
	closes := opens.Add(time.Hour)
	hash := audit.EligibleListHash([]string{"u2", "u1", "u1"})
	leaf := int64(0)
	row := audit.ExportRow{PollID: "lunch", RecordedAt: opens, LeafIndex: &leaf, Definition: &audit.Definition{
		PollID: "lunch", Title: "Where to \"eat\" <today>?", OpensAt: opens, ClosesAt: &closes, EligibleHash: &hash, Choices: []string{"thai", "pizza"}}}
	line := audit.AppendExportLine(nil, row)
	want := `{"kind":"definition","poll_id":"lunch","title":"Where to \"eat\" \u003ctoday\u003e?","opens_at":"2026-12-02T07:00:00.123456Z",` +
		`"closes_at":"2026-12-02T08:00:00.123456Z","eligible_hash":"` + fmt.Sprintf("%x", hash) + `","choices":["thai","pizza"],` +
		`"recorded_at":"2026-12-02T07:00:00.123456Z","leaf_index":0}` + "\n"
	if string(line) != want {
		t.Fatalf("definition line:\n%s\nwant\n%s", line, want)
	}
	back, err := audit.ParseExportLine(line)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, row) {
		t.Fatalf("read back %+v, want %+v", back, row)
	}
	if hash != audit.EligibleListHash([]string{"u1", "u2"}) {
		t.Fatal("the eligible list's hash depends on its order or repeats")
	}
}
