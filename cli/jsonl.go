package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

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

// parseImportLine reads one line of an import file. now stands in for a
// missing received_at. Its errors say what is wrong with the line.
func parseImportLine(line []byte, now time.Time) (ledger.Event, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var l ledgerLine
	if err := dec.Decode(&l); err != nil {
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.As(err, &typeErr):
			return ledger.Event{}, fmt.Errorf("field %q must be a %s", typeErr.Field, wantType(typeErr.Field))
		case errors.Is(err, io.EOF):
			return ledger.Event{}, errors.New("the line is empty; each line must be one JSON object")
		default:
			return ledger.Event{}, fmt.Errorf("not a JSON object of the export format: %v", err)
		}
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
		if !ledger.ValidID(f.v) {
			return ledger.Event{}, fmt.Errorf("field %q is %q: ids are 1-64 characters of [A-Za-z0-9_-]", f.name, f.v)
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
