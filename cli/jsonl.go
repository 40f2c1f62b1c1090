package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"time"

	"tally/ledger"
	"tally/vote"
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
	LeafIndex   *int64     `json:"leaf_index,omitempty"` // export: the row's leaf in its poll's log
}

// maxReceivedSkew is how far past the time of the import a received_at may
// lie: clocks differ a little, but an event cannot have been received in
// the future, and one dated there would sort after the votes still to come.
const maxReceivedSkew = 5 * time.Minute

// parseImportLine reads one line of an import file: one JSON object with
// the keys of ledgerLine, each at most once, spelt exactly, nothing after
// it. now, the time of the import, stands in for a missing received_at and
// bounds a given one (maxReceivedSkew). Its errors say what is wrong with
// the line.
func parseImportLine(line []byte, now time.Time) (ledger.Event, error) {
	l, err := decodeImportLine(line)
	if err != nil {
		return ledger.Event{}, err
	}
	if err := checkImportIDs(l); err != nil {
		return ledger.Event{}, err
	}
	e := ledger.Event{PrincipalID: l.PrincipalID, ClientEventID: l.EventID, PollID: l.PollID,
		CandidateID: l.CandidateID, ReceivedAt: now}
	if l.ReceivedAt != nil {
		if l.ReceivedAt.IsZero() {
			return ledger.Event{}, errors.New(`field "received_at" must be an RFC 3339 time after year 1`)
		}
		if l.ReceivedAt.After(now.Add(maxReceivedSkew)) {
			return ledger.Event{}, fmt.Errorf(`field "received_at" is %s, later than the time of the import (%s) plus %s: `+
				`an event cannot have been received in the future; correct the time, or leave received_at out to use the time of the import`,
				l.ReceivedAt.Format(time.RFC3339), now.UTC().Format(time.RFC3339), maxReceivedSkew)
		}
		e.ReceivedAt = *l.ReceivedAt
	}
	return e, nil
}

// decodeImportLine decodes the one JSON object of line, refusing what
// encoding/json would let pass: unknown or differently spelt keys, a key
// given twice, null ids, and data after the object.
func decodeImportLine(line []byte) (ledgerLine, error) {
	var l ledgerLine
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	tok, err := dec.Token()
	if errors.Is(err, io.EOF) {
		return l, errors.New("the line is empty; each line must be one JSON object")
	}
	if d, ok := tok.(json.Delim); err != nil || !ok || d != '{' {
		return l, errors.New("the line is not a JSON object; each line must be one object like tally export writes")
	}
	if err := decodeImportFields(dec, &l); err != nil {
		return l, err
	}
	if _, err := dec.Token(); err != nil {
		return l, fmt.Errorf("malformed JSON: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return l, errors.New("data follows the JSON object; each line must hold exactly one object")
	}
	return l, nil
}

// decodeImportFields reads the key-value pairs of the object dec is in
// into l, up to its closing brace.
func decodeImportFields(dec *json.Decoder, l *ledgerLine) error {
	fields := map[string]any{
		"seq": &l.Seq, "event_id": &l.EventID, "poll_id": &l.PollID, "candidate_id": &l.CandidateID,
		"principal_id": &l.PrincipalID, "received_at": &l.ReceivedAt, "recorded_at": &l.RecordedAt,
		"leaf_index": &l.LeafIndex,
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("malformed JSON: %v", err)
		}
		key, _ := tok.(string)
		dst, known := fields[key]
		if !known {
			return fmt.Errorf("unknown field %q; the fields are event_id, poll_id, candidate_id, principal_id, received_at (and seq, recorded_at, leaf_index, which import ignores)", key)
		}
		if seen[key] {
			return fmt.Errorf("field %q is given twice", key)
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return fmt.Errorf("malformed JSON: %v", err)
		}
		if err := json.Unmarshal(raw, dst); err != nil || string(raw) == "null" && key != "received_at" && key != "recorded_at" && key != "leaf_index" {
			return fieldError(key, raw)
		}
	}
	return nil
}

// checkImportIDs checks that every id of l is present and valid.
func checkImportIDs(l ledgerLine) error {
	for _, f := range []struct{ name, v string }{
		{"event_id", l.EventID}, {"poll_id", l.PollID}, {"candidate_id", l.CandidateID}, {"principal_id", l.PrincipalID},
	} {
		if f.v == "" {
			return fmt.Errorf("field %q is missing or empty", f.name)
		}
		if !vote.ValidID(f.v) {
			return fmt.Errorf("field %q is %q: ids are "+vote.IDRule, f.name, f.v)
		}
	}
	return nil
}

// wholeFields are the fields that hold a whole number, each with what it
// is. Import ignores their values, but refuses one it cannot read as an
// int64, saying why.
var wholeFields = map[string]string{
	"seq":        "a seq is a whole number from 1",
	"leaf_index": "a leaf index is a whole number from 0",
}

// fieldError says what is wrong with raw, the value of key that did not
// decode. A whole-number field given a number that is not an int64 is out
// of range or not whole, not of the wrong type.
func fieldError(key string, raw json.RawMessage) error {
	lit := string(bytes.TrimSpace(raw))
	what, whole := wholeFields[key]
	if !whole || lit == "" || lit[0] != '-' && (lit[0] < '0' || lit[0] > '9') {
		return fmt.Errorf("field %q must be a %s", key, wantType(key))
	}
	fix := fmt.Sprintf("%s to %d (2^63-1); correct it, or leave %s out (import ignores it)", what, int64(math.MaxInt64), key)
	f, _, err := big.ParseFloat(lit, 10, 0, big.ToZero)
	if err == nil && (f.Cmp(new(big.Float).SetInt64(math.MaxInt64)) > 0 || f.Cmp(new(big.Float).SetInt64(math.MinInt64)) < 0) {
		return fmt.Errorf("field %q is %s, out of range: %s", key, lit, fix)
	}
	return fmt.Errorf("field %q is %s, not a whole number written in digits: %s", key, lit, fix)
}

func wantType(field string) string {
	switch field {
	case "seq", "leaf_index":
		return "whole number"
	case "received_at", "recorded_at":
		return "string holding an RFC 3339 time"
	}
	return "string"
}
