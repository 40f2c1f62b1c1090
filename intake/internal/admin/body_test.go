package admin

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestDecodeStrictRefuses: a key in another case, or twice, is refused,
// naming it, and so is a closing bracket after the object.
func TestDecodeStrictRefuses(t *testing.T) {
	for body, want := range map[string]string{
		`{"POLL_ID":"x","title":"T","choices":["a"]}`:          `key "POLL_ID", which is not one of the route's`,
		`{"poll_id":"x","title":"T","title":"U","choices":[]}`: `key "title" twice`,
		`{"poll_id":"x","Title":"T"}`:                          `key "Title"`,
		`{"poll_id":"x"}}`:                                     `goes on after the JSON object`,
		`{"ballot":{"kind":"score","MAX_SCORE":3}}`:            `key "MAX_SCORE" in "ballot"`,
		`{"ballot":{"kind":"score","kind":"ranked"}}`:          `key "ballot.kind" twice`,
		`{"ballot":{"kind":"multiple","colour":1}}`:            `key "colour" in "ballot"`,
		`{"ballot":{"kind":"multiple","max_choices":"2"}}`:     `"ballot.max_choices" is a string: it takes a number`,
		`{"ballot":"ranked"}`:                                  `"ballot" is a string: it takes an object`,
		`{"poll_id":"x","title":`:                              `ends before the object is closed (after byte 23)`,
		`{"eligible":[1]}`:                                     `"eligible" is a number: it takes a string`,
		`true`:                                                 `must be a JSON object, not a boolean`,
	} {
		var q pollRequest
		if err := decodeStrict([]byte(body), &q); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
}

// FuzzDecodePollRequest: the admin routes' strict reader takes only a
// body that is one JSON object of the request's keys, and what it takes
// reads back the same once written again; it never panics, and a refusal
// says what is wrong.
func FuzzDecodePollRequest(f *testing.F) {
	for _, seed := range []string{
		`{"poll_id":"lunch","title":"Lunch?","choices":["pizza","sushi"]}`,
		`{"poll_id":"t","title":"T","choices":["a"],"opens_at":"2026-12-01T17:00:00Z","closes_at":null,"eligible":["p-1"],"public_results":true}`,
		`{"poll_id":"t","colour":"red"}`,
		`{"choices":"a"}`,
		`{} {}`,
		`[]`,
		``,
		`{"title":"\u00e9\ud83d\ude00"}`,
		`{"POLL_ID":"x"}`,
		`{"title":"a","title":"b"}`,
		`{"poll_id":"m","title":"M","choices":["a","b","c"],"ballot":{"kind":"multiple","min_choices":1,"max_choices":2},"answers":"latest"}`,
		`{"poll_id":"s","title":"S","choices":["a","b"],"ballot":{"kind":"score","max_score":5,"budget":7}}`,
		`{"ballot":{"kind":"ranked"},"answers":"final"}`,
		`{"ballot":{"kind":"approve","Kind":"x"}}`,
		`{"ballot":{"kind":"score","max_score":-1,"budget":1e99}}`,
		`{"ballot":null}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var q pollRequest
		err := decodeStrict(body, &q)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("a refusal of %q says nothing", body)
			}
			return
		}
		trimmed := bytes.TrimSpace(body)
		var keys map[string]json.RawMessage
		if !json.Valid(trimmed) || len(trimmed) == 0 || trimmed[0] != '{' || json.Unmarshal(trimmed, &keys) != nil {
			t.Fatalf("took %q, which is not one JSON object", body)
		}
		for k := range keys {
			if !slices.Contains([]string{"poll_id", "title", "choices", "opens_at", "closes_at", "eligible", "public_results", "ballot", "answers"}, k) {
				t.Fatalf("took %q, whose key %q is not the route's", body, k)
			}
		}
		again, err := json.Marshal(q)
		if err != nil {
			t.Fatal(err)
		}
		var back pollRequest
		if err := decodeStrict(again, &back); err != nil || !reflect.DeepEqual(back, q) {
			t.Fatalf("took %q as %+v; written again %s it reads %+v (%v)", body, q, again, back, err)
		}
		if _, err := q.poll(); err != nil && err.Error() == "" {
			t.Fatalf("a refused time or ballot in %q says nothing", body)
		}
	})
}
