package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

var importLineCases = []struct {
	name, line string
	wantErr    string // empty: accepted
}{
	{"minimal", `{"event_id":"e1","poll_id":"p","candidate_id":"c","principal_id":"u"}`, ""},
	{"export format", `{"seq":7,"event_id":"e1","poll_id":"p","candidate_id":"c","principal_id":"u","received_at":"2026-11-30T07:00:00Z","recorded_at":"2026-11-30T07:00:01Z"}`, ""},
	{"spaces", ` { "event_id" : "e1", "poll_id":"p","candidate_id":"c","principal_id":"u" } `, ""},
	{"empty", ``, "empty"},
	{"array", `["e1"]`, "not a JSON object"},
	{"unknown field", `{"event_id":"e1","poll_id":"p","candidate_id":"c","principal_id":"u","x":1}`, `unknown field "x"`},
	{"wrong case", `{"EVENT_ID":"e1","poll_id":"p","candidate_id":"c","principal_id":"u"}`, `unknown field "EVENT_ID"`},
	{"duplicate key", `{"event_id":"e1","event_id":"e2","poll_id":"p","candidate_id":"c","principal_id":"u"}`, "given twice"},
	{"number id", `{"event_id":1,"poll_id":"p","candidate_id":"c","principal_id":"u"}`, `"event_id" must be a string`},
	{"null id", `{"event_id":null,"poll_id":"p","candidate_id":"c","principal_id":"u"}`, `"event_id" must be a string`},
	{"missing principal", `{"event_id":"e1","poll_id":"p","candidate_id":"c"}`, `"principal_id" is missing`},
	{"bad id", `{"event_id":"e 1","poll_id":"p","candidate_id":"c","principal_id":"u"}`, "1-64 characters"},
	{"long id", `{"event_id":"` + strings.Repeat("a", 65) + `","poll_id":"p","candidate_id":"c","principal_id":"u"}`, "1-64 characters"},
	{"received a moment ahead", `{"event_id":"e1","poll_id":"p","candidate_id":"c","principal_id":"u","received_at":"2026-12-01T00:04:59Z"}`, ""},
	{"received in the future", `{"event_id":"e1","poll_id":"p","candidate_id":"c","principal_id":"u","received_at":"2026-12-01T00:05:01Z"}`,
		`"received_at" is 2026-12-01T00:05:01Z, later than the time of the import (2026-12-01T00:00:00Z) plus 5m0s`},
	{"bad time", `{"event_id":"e1","poll_id":"p","candidate_id":"c","principal_id":"u","received_at":"yesterday"}`, "RFC 3339"},
	{"trailing data", `{"event_id":"e1","poll_id":"p","candidate_id":"c","principal_id":"u"} {}`, "data follows"},
	{"truncated", `{"event_id":"e1","poll_id":"p"`, "malformed JSON"},
	// leaf_index and seq are whole numbers up to 2^63-1; import reads and
	// ignores them, and says what is wrong with one that is not.
	{"leaf_index", `{"seq":7,"event_id":"e1","poll_id":"p","candidate_id":"c","principal_id":"u","leaf_index":0}`, ""},
	{"leaf_index null", `{"event_id":"e1","poll_id":"p","candidate_id":"c","principal_id":"u","leaf_index":null}`, ""},
	{"leaf_index 2^63-1", `{"event_id":"e1","poll_id":"p","candidate_id":"c","principal_id":"u","leaf_index":9223372036854775807}`, ""},
	{"leaf_index 2^63", `{"event_id":"e1","poll_id":"p","candidate_id":"c","principal_id":"u","leaf_index":9223372036854775808}`,
		`field "leaf_index" is 9223372036854775808, out of range: a leaf index is a whole number from 0 to 9223372036854775807 (2^63-1); correct it, or leave leaf_index out`},
	{"leaf_index far past 2^63", `{"event_id":"e1","poll_id":"p","candidate_id":"c","principal_id":"u","leaf_index":1e30}`, `field "leaf_index" is 1e30, out of range`},
	{"leaf_index not whole", `{"event_id":"e1","poll_id":"p","candidate_id":"c","principal_id":"u","leaf_index":1.5}`, `field "leaf_index" is 1.5, not a whole number written in digits`},
	{"leaf_index in exponent form", `{"event_id":"e1","poll_id":"p","candidate_id":"c","principal_id":"u","leaf_index":1e3}`, `field "leaf_index" is 1e3, not a whole number written in digits`},
	{"leaf_index below -2^63", `{"event_id":"e1","poll_id":"p","candidate_id":"c","principal_id":"u","leaf_index":-9223372036854775809}`, `field "leaf_index" is -9223372036854775809, out of range`},
	{"leaf_index a string", `{"event_id":"e1","poll_id":"p","candidate_id":"c","principal_id":"u","leaf_index":"3"}`, `field "leaf_index" must be a whole number`},
	{"seq 2^63", `{"seq":9223372036854775808,"event_id":"e1","poll_id":"p","candidate_id":"c","principal_id":"u"}`,
		`field "seq" is 9223372036854775808, out of range: a seq is a whole number from 1 to 9223372036854775807 (2^63-1); correct it, or leave seq out`},
}

func TestParseImportLine(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range importLineCases {
		t.Run(tc.name, func(t *testing.T) {
			e, _, err := parseImportLine([]byte(tc.line), now)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if e.ClientEventID != "e1" || e.PollID != "p" || e.CandidateID != "c" || e.PrincipalID != "u" {
					t.Fatalf("parsed %+v", e)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// FuzzParseImportLine checks that whatever the parser accepts is one JSON
// object of known, exactly-spelt, string-valued id fields that hold valid
// ids, and that it never panics.
func FuzzParseImportLine(f *testing.F) {
	for _, tc := range importLineCases {
		f.Add(tc.line)
	}
	now := time.Now()
	f.Fuzz(func(t *testing.T, line string) {
		e, _, err := parseImportLine([]byte(line), now)
		if err != nil {
			return
		}
		var m map[string]any
		if jerr := json.Unmarshal([]byte(line), &m); jerr != nil {
			t.Fatalf("accepted %q, which is not one JSON object: %v", line, jerr)
		}
		allowed := map[string]bool{"seq": true, "event_id": true, "poll_id": true, "candidate_id": true,
			"principal_id": true, "received_at": true, "recorded_at": true, "leaf_index": true}
		for k := range m {
			if !allowed[k] {
				t.Fatalf("accepted %q with unknown key %q", line, k)
			}
		}
		for k, got := range map[string]string{"event_id": e.ClientEventID, "poll_id": e.PollID,
			"candidate_id": e.CandidateID, "principal_id": e.PrincipalID} {
			if s, ok := m[k].(string); !ok || s != got {
				t.Fatalf("accepted %q: %s is %v, parsed as %q", line, k, m[k], got)
			}
			if len(got) < 1 || len(got) > 64 || strings.Trim(got, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
				t.Fatalf("accepted %q with invalid %s %q", line, k, got)
			}
		}
		if e.ReceivedAt.IsZero() {
			t.Fatalf("accepted %q without a receive time", line)
		}
	})
}
