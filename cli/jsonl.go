package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"tally/vote"

	"tally/ledger"
)

// ledgerLine is one event as export writes it and import reads it: a JSON
// object on one line. seq and recorded_at are written for the reader and
// ignored by import; received_at is optional on import (default: now).
type ledgerLine struct {
	Seq         int64      `json:"seq,omitempty"`
	EventID     string     `json:"event_id"`
	PollID      string     `json:"poll_id"`
	CandidateID string     `json:"candidate_id"`
	PrincipalID string     `json:"principal_id"`
	ReceivedAt  *time.Time `json:"received_at,omitempty"`
	RecordedAt  *time.Time `json:"recorded_at,omitempty"`
}

// parseImportLine reads one line of an import file: one JSON object with
// the keys of ledgerLine, each at most once, spelt exactly, nothing after
// it. now stands in for a missing received_at. Its errors say what is wrong
// with the line.
func parseImportLine(line []byte, now time.Time) (ledger.Event, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	tok, err := dec.Token()
	if errors.Is(err, io.EOF) {
		return ledger.Event{}, errors.New("the line is empty; each line must be one JSON object")
	}
	if d, ok := tok.(json.Delim); err != nil || !ok || d != '{' {
		return ledger.Event{}, errors.New("the line is not a JSON object; each line must be one object like tally export writes")
	}
	var l ledgerLine
	fields := map[string]any{
		"seq": &l.Seq, "event_id": &l.EventID, "poll_id": &l.PollID, "candidate_id": &l.CandidateID,
		"principal_id": &l.PrincipalID, "received_at": &l.ReceivedAt, "recorded_at": &l.RecordedAt,
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return ledger.Event{}, fmt.Errorf("malformed JSON: %v", err)
		}
		key, _ := tok.(string)
		dst, known := fields[key]
		if !known {
			return ledger.Event{}, fmt.Errorf("unknown field %q; the fields are event_id, poll_id, candidate_id, principal_id, received_at (and seq, recorded_at, which import ignores)", key)
		}
		if seen[key] {
			return ledger.Event{}, fmt.Errorf("field %q is given twice", key)
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return ledger.Event{}, fmt.Errorf("malformed JSON: %v", err)
		}
		if err := json.Unmarshal(raw, dst); err != nil || string(raw) == "null" && key != "received_at" && key != "recorded_at" {
			return ledger.Event{}, fmt.Errorf("field %q must be a %s", key, wantType(key))
		}
	}
	if _, err := dec.Token(); err != nil {
		return ledger.Event{}, fmt.Errorf("malformed JSON: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return ledger.Event{}, errors.New("data follows the JSON object; each line must hold exactly one object")
	}
	for _, f := range []struct{ name, v string }{
		{"event_id", l.EventID}, {"poll_id", l.PollID}, {"candidate_id", l.CandidateID}, {"principal_id", l.PrincipalID},
	} {
		if f.v == "" {
			return ledger.Event{}, fmt.Errorf("field %q is missing or empty", f.name)
		}
		if !vote.ValidID(f.v) {
			return ledger.Event{}, fmt.Errorf("field %q is %q: ids are "+vote.IDRule, f.name, f.v)
		}
	}
	e := ledger.Event{PrincipalID: l.PrincipalID, ClientEventID: l.EventID, PollID: l.PollID,
		CandidateID: l.CandidateID, ReceivedAt: now}
	if l.ReceivedAt != nil {
		if l.ReceivedAt.IsZero() {
			return ledger.Event{}, errors.New(`field "received_at" must be an RFC 3339 time after year 1`)
		}
		e.ReceivedAt = *l.ReceivedAt
	}
	return e, nil
}

func wantType(field string) string {
	switch field {
	case "seq":
		return "number"
	case "received_at", "recorded_at":
		return "string holding an RFC 3339 time"
	}
	return "string"
}
