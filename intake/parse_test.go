package intake

import (
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"tally/vote"
)

// parsed is a vote body's ids and raw ballot as strings, to compare.
type parsed struct{ eventID, pollID, candidateID, ballot string }

func (v voteBody) strings() parsed {
	return parsed{v.eventID, string(v.pollID), string(v.candidateID), string(v.ballot)}
}

var parseCases = []struct {
	name   string
	body   string
	want   parsed // when detail is empty
	detail string // a substring of the refusal's detail
	slow   bool   // valid, but only the token parser takes it
}{
	{name: "ok", body: `{"event_id":"e1","poll_id":"p1","candidate_id":"c1"}`, want: parsed{"e1", "p1", "c1", ""}},
	{name: "ok any order and whitespace", body: " \n{ \"candidate_id\" : \"c_1\", \"poll_id\":\"P-1\",\t\"event_id\":\"e\" }\r\n", want: parsed{"e", "P-1", "c_1", ""}},
	{name: "ok 64 chars", body: `{"event_id":"` + strings.Repeat("a", 64) + `","poll_id":"p","candidate_id":"c"}`, want: parsed{strings.Repeat("a", 64), "p", "c", ""}},
	{name: "ok escaped key", body: `{"event\u005fid":"e","poll_id":"p","candidate_id":"c"}`, want: parsed{"e", "p", "c", ""}, slow: true},
	{name: "ok escaped value", body: `{"event_id":"\u0065","poll_id":"p","candidate_id":"c"}`, want: parsed{"e", "p", "c", ""}, slow: true},
	// A ballot is any JSON value here, read against its poll's kind once
	// the poll is known (vote.ParseBallot, in admit).
	{name: "ballot single", body: `{"event_id":"e","poll_id":"p","ballot":"a"}`, want: parsed{"e", "p", "", `"a"`}, slow: true},
	{name: "ballot multiple", body: `{"ballot":["c","a"],"event_id":"e","poll_id":"p"}`, want: parsed{"e", "p", "", `["c","a"]`}, slow: true},
	{name: "ballot approve", body: `{"event_id":"e","ballot": {"a":"yes","b":"no"} ,"poll_id":"p"}`, want: parsed{"e", "p", "", `{"a":"yes","b":"no"}`}, slow: true},
	{name: "ballot score", body: `{"event_id":"e","poll_id":"p","ballot":{"a":3,"b":0}}`, want: parsed{"e", "p", "", `{"a":3,"b":0}`}, slow: true},
	{name: "ballot ranked", body: `{"event_id":"e","poll_id":"p","ballot":["c","a","b"]}`, want: parsed{"e", "p", "", `["c","a","b"]`}, slow: true},
	{name: "ballot of another shape", body: `{"event_id":"e","poll_id":"p","ballot":null}`, want: parsed{"e", "p", "", `null`}, slow: true},
	{name: "ballot and candidate", body: `{"event_id":"e","poll_id":"p","candidate_id":"a","ballot":"a"}`, detail: `both "candidate_id" and "ballot"`},
	{name: "ballot twice", body: `{"event_id":"e","poll_id":"p","ballot":["a"],"ballot":["a"]}`, detail: `the key "ballot" appears more than once`},
	{name: "ballot other case", body: `{"event_id":"e","poll_id":"p","BALLOT":["a"]}`, detail: `the key "BALLOT" is not allowed`},
	{name: "ballot broken", body: `{"event_id":"e","poll_id":"p","ballot":{"a":}}`, detail: "not valid JSON"},
	{name: "ballot truncated", body: `{"event_id":"e","poll_id":"p","ballot":["a"`, detail: "not valid JSON"},
	{name: "ballot trailing", body: `{"event_id":"e","poll_id":"p","ballot":["a"]}["a"]`, detail: "after the JSON object"},
	{name: "ballot too large", body: `{"event_id":"e","poll_id":"p","ballot":["a"` + strings.Repeat(`,"a"`, 1100) + `]}`, detail: "but a vote takes at most 4096"},
	{name: "empty", body: ``, detail: "the body is empty"},
	{name: "bom", body: "\xef\xbb\xbf" + `{"event_id":"e1","poll_id":"p1","candidate_id":"c1"}`, detail: "the body starts with a byte order mark (BOM): send UTF-8 JSON without it"},
	{name: "bom after space", body: " \xef\xbb\xbf{}", detail: "byte order mark (BOM)"},
	{name: "bom alone", body: "\xef\xbb\xbf", detail: "byte order mark (BOM)"},
	{name: "blank", body: "  \n", detail: "the body is empty"},
	{name: "array", body: `[]`, detail: "the body must be a JSON object, not an array: send {"},
	{name: "string", body: `"x"`, detail: "must be a JSON object, not a string"},
	{name: "null", body: `null`, detail: "must be a JSON object, not null"},
	{name: "not json", body: `event_id=e1`, detail: "the body is not valid JSON at byte 1 (invalid character 'e' looking for beginning of value): send one JSON object"},
	{name: "truncated", body: `{"event_id":"e1"`, detail: "ends before the object is closed"},
	{name: "trailing comma", body: `{"event_id":"e1","poll_id":"p","candidate_id":"c",}`, detail: "not valid JSON at byte 51 (invalid character '}' looking for beginning of object key string)"},
	{name: "unknown key", body: `{"event_id":"e1","poll_id":"p","candidate_id":"c","principal":"x"}`, detail: `the key "principal" is not allowed`},
	{name: "long unknown key", body: `{"` + strings.Repeat("k", 100) + `":"x"}`, detail: `"... is not allowed`},
	{name: "duplicate key", body: `{"event_id":"e1","poll_id":"p","event_id":"e2","candidate_id":"c"}`, detail: `the key "event_id" appears more than once`},
	{name: "duplicate escaped", body: `{"poll_id":"p","poll\u005fid":"p","event_id":"e","candidate_id":"c"}`, detail: `key "poll_id" appears more than once`},
	{name: "missing key", body: `{"event_id":"e1","poll_id":"p"}`, detail: `the key "candidate_id" (or "ballot") is missing`},
	{name: "empty object", body: `{}`, detail: `the key "event_id" is missing`},
	{name: "number", body: `{"event_id":1,"poll_id":"p","candidate_id":"c"}`, detail: `the value of "event_id" must be a string, not a number`},
	{name: "bool", body: `{"event_id":"e","poll_id":true,"candidate_id":"c"}`, detail: `the value of "poll_id" must be a string, not a boolean`},
	{name: "null value", body: `{"event_id":"e","poll_id":"p","candidate_id":null}`, detail: `the value of "candidate_id" must be a string, not null`},
	{name: "object value", body: `{"event_id":{"a":"b"},"poll_id":"p","candidate_id":"c"}`, detail: `must be a string, not an object`},
	{name: "array value", body: `{"event_id":["e"],"poll_id":"p","candidate_id":"c"}`, detail: `must be a string, not an array`},
	{name: "empty id", body: `{"event_id":"","poll_id":"p","candidate_id":"c"}`, detail: `the value of "event_id" must be 1-64 characters of [A-Za-z0-9_-], not an empty string`},
	{name: "long id", body: `{"event_id":"` + strings.Repeat("a", 65) + `","poll_id":"p","candidate_id":"c"}`, detail: "not a string of 65 bytes"},
	{name: "bad char", body: `{"event_id":"e 1","poll_id":"p","candidate_id":"c"}`, detail: `not "e 1", which has a forbidden character at position 2`},
	{name: "unicode id", body: `{"event_id":"é","poll_id":"p","candidate_id":"c"}`, detail: "forbidden character"},
	{name: "newline escape id", body: `{"event_id":"e\n","poll_id":"p","candidate_id":"c"}`, detail: "forbidden character"},
	{name: "trailing object", body: `{"event_id":"e","poll_id":"p","candidate_id":"c"}{}`, detail: "after the JSON object"},
	{name: "trailing garbage", body: `{"event_id":"e","poll_id":"p","candidate_id":"c"} x`, detail: "the body goes on after the JSON object, at byte 51: send one object and nothing else"},
	{name: "trailing string", body: `{"event_id":"e","poll_id":"p","candidate_id":"c"}"x"`, detail: "the body has a string after the JSON object: send one object and nothing else"},
	{name: "too large", body: `{"event_id":"e","poll_id":"p","candidate_id":"c"}` + strings.Repeat(" ", maxBodyBytes), detail: "the body is 4145 bytes, but a vote takes at most 4096"},
}

func TestParseVote(t *testing.T) {
	t.Parallel()
	for _, tc := range parseCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseVote([]byte(tc.body))
			plain, plainOK := parsePlain([]byte(tc.body))
			if tc.detail == "" {
				if err != nil {
					t.Fatalf("parseVote(%q): %v", tc.body, err)
				}
				if got.strings() != tc.want {
					t.Fatalf("parseVote(%q) = %+v, want %+v", tc.body, got.strings(), tc.want)
				}
				if plainOK != !tc.slow {
					t.Fatalf("parsePlain(%q) took it: %v; want %v", tc.body, plainOK, !tc.slow)
				}
				return
			}
			if plainOK {
				t.Fatalf("parsePlain(%q) accepted %+v", tc.body, plain.strings())
			}
			if err == nil {
				t.Fatalf("parseVote(%q) accepted %+v, want a refusal containing %q", tc.body, got.strings(), tc.detail)
			}
			if _, ok := err.(*parseError); !ok {
				t.Fatalf("parseVote(%q) error is %T, want *parseError", tc.body, err)
			}
			if !strings.Contains(err.Error(), tc.detail) {
				t.Fatalf("parseVote(%q) = %q, want it to contain %q", tc.body, err, tc.detail)
			}
		})
	}
}

// TestParsePlainInPlace checks what the handler relies on: the fast path
// returns the poll and candidate ids as slices of the body (no copy), and
// allocates only the event id's string.
func TestParsePlainInPlace(t *testing.T) {
	body := []byte(`{"event_id":"e1","poll_id":"p1","candidate_id":"c1"}`)
	v, ok := parsePlain(body)
	if !ok {
		t.Fatal("parsePlain refused the plain form")
	}
	for _, id := range [][]byte{v.pollID, v.candidateID} {
		if !inside(id, body) {
			t.Fatalf("id %q is not a slice of the body", id)
		}
	}
	if n := testing.AllocsPerRun(100, func() { parsePlain(body) }); n != 1 {
		t.Fatalf("parsePlain allocates %v times, want 1 (the event id)", n)
	}
}

// inside reports whether s is a slice of b's array.
func inside(s, b []byte) bool {
	for i := range b {
		if len(s) > 0 && &b[i] == &s[0] {
			return true
		}
	}
	return false
}

var fuzzIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// FuzzParseVote checks that parseVote never panics and that whatever it
// accepts satisfies the rules, re-checked independently: valid JSON, one
// object with exactly three members (counted on the raw bytes), event_id
// and poll_id strings matching the id pattern and equal to what was
// parsed, and one of candidate_id (likewise) or ballot (a JSON value equal
// to what was parsed), at most maxBodyBytes. Whatever the fast path
// accepts, the strict parser must accept the same. A ballot is then read
// as each kind would read it: what vote.ParseBallot accepts has a
// canonical form that reads back as itself, and what it refuses is a
// *vote.ShapeError (the 400 that names what is wrong).
func FuzzParseVote(f *testing.F) {
	for _, tc := range parseCases {
		f.Add([]byte(tc.body))
	}
	for _, ballot := range []string{`"a"`, `["a","c"]`, `["c","a","b"]`, `[]`, `{"a":"yes","b":"no","c":"abstain"}`,
		`{"a":3,"b":0}`, `{}`, `{"b":1,"a":2}`, `{"a":"yes","a":"no"}`, `{"a":-1}`, `{"a":1e3}`, `["a","a"]`, `[1]`, `{"a":"maybe"}`} {
		f.Add([]byte(`{"event_id":"e","poll_id":"p","ballot":` + ballot + `}`))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if fast, ok := parsePlain(body); ok {
			if slow, err := parseStrict(body); err != nil || slow.strings() != fast.strings() {
				t.Fatalf("fast path accepted %q as %+v, the strict parser says %+v, %v", body, fast.strings(), slow.strings(), err)
			}
			if fast.ballot != nil {
				t.Fatalf("fast path accepted %q with a ballot", body)
			}
		}
		v, err := parseVote(body)
		if err != nil {
			if _, ok := err.(*parseError); !ok {
				t.Fatalf("error %T (%v), want *parseError", err, err)
			}
			if err.Error() == "" {
				t.Fatal("empty detail")
			}
			return
		}
		if len(body) > maxBodyBytes {
			t.Fatalf("accepted %d bytes", len(body))
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatalf("accepted %q, which is not an object: %v", body, err)
		}
		if len(m) != 3 {
			t.Fatalf("accepted %q with %d distinct keys", body, len(m))
		}
		if n := topLevelMembers(body); n != 3 {
			t.Fatalf("accepted %q with %d members (duplicate keys?)", body, n)
		}
		ids := map[string]string{"event_id": v.eventID, "poll_id": string(v.pollID)}
		if _, ok := m["ballot"]; ok {
			fuzzBallot(t, body, m["ballot"], v)
		} else {
			ids["candidate_id"] = string(v.candidateID)
			if string(v.answer) != string(v.candidateID) {
				t.Fatalf("accepted %q: answer %q, candidate %q", body, v.answer, v.candidateID)
			}
		}
		for k, want := range ids {
			s, ok := m[k].(string)
			if !ok {
				t.Fatalf("accepted %q where %s is %T", body, k, m[k])
			}
			if s != want || !fuzzIDRE.MatchString(s) {
				t.Fatalf("accepted %q: %s = %q, parsed %q", body, k, s, want)
			}
		}
	})
}

// fuzzBallot checks the ballot parseVote read from body, whose ballot
// decodes to want: the same value, and for each kind either refused with
// a *vote.ShapeError or read to a canonical form that reads back as itself
// and is the fingerprint's whatever the spelling.
func fuzzBallot(t *testing.T, body []byte, want any, v voteBody) {
	t.Helper()
	if v.candidateID != nil {
		t.Fatalf("accepted %q with both a candidate and a ballot", body)
	}
	var got any
	if err := json.Unmarshal(v.ballot, &got); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("accepted %q: ballot %q, want the value %v (%v)", body, v.ballot, want, err)
	}
	for _, k := range vote.Kinds {
		b, err := vote.ParseBallot(k, v.ballot)
		if err != nil {
			var se *vote.ShapeError
			if !errors.As(err, &se) || se.Reason == "" {
				t.Fatalf("%s ballot %q: error %T %v, want a *vote.ShapeError", k, v.ballot, err, err)
			}
			continue
		}
		c := b.Canonical()
		again, err := vote.ParseCanonical(k, c)
		if err != nil || again.Canonical() != c {
			t.Fatalf("%s ballot %q: canonical %q does not read back (%v)", k, v.ballot, c, err)
		}
	}
}

// topLevelMembers counts the members of the JSON object in body by counting
// the commas outside strings at depth one; it assumes body is valid JSON.
func topLevelMembers(body []byte) int {
	depth, commas, inString, escaped, empty := 0, 0, false, false, true
	for _, c := range body {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			continue
		case c == '}' || c == ']':
			depth--
			continue
		case c == ',' && depth == 1:
			commas++
		}
		if depth == 1 && c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			empty = false
		}
	}
	if empty {
		return 0
	}
	return commas + 1
}
