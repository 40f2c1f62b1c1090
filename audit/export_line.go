package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"time"

	"tally/vote"
)

// This file owns the export's line, byte for byte (docs/audit.md, "The
// export"): ExportRow, the bytes tally export writes for it
// (AppendExportLine, and MarshalJSON, which writes the same), and its
// strict reading (ParseExportLine), which tally audit verify and tally
// import share. A definition's line is export_definition.go's; the fast
// path for a line tally wrote, export_line_written.go's.

// TimeFormat is how an export writes a time: RFC 3339 in UTC with exactly
// six fractional digits, the microseconds PostgreSQL keeps.
const TimeFormat = "2006-01-02T15:04:05.000000Z07:00"

// ExportRow is one line of an export: one ledger row. Each poll's rows
// come in its leaf order (which is not always the order of seq: two
// appends to one poll may commit in the other order than they drew their
// seqs); seq is the row's id in the ledger. A zero Seq, ReceivedAt or
// RecordedAt, or a nil LeafIndex, is a field the line does not carry.
type ExportRow struct {
	Seq         int64
	EventID     string
	PollID      string
	CandidateID string // a vote of one choice; empty when Ballot is set
	// Ballot is the canonical form of a ballot of another kind than
	// single (Leaf.Ballot), written raw: "ballot":["a","c"].
	Ballot      string
	PrincipalID string
	ReceivedAt  time.Time
	RecordedAt  time.Time
	LeafIndex   *int64
	// Definition, when set, makes the line a definition line (kind
	// "definition"): the poll's definition leaf, with PollID, RecordedAt
	// and LeafIndex; the vote's fields are empty.
	Definition *Definition
}

// Leaf is the row's leaf in its poll's log.
func (r ExportRow) Leaf() Leaf {
	return Leaf{PollID: r.PollID, CandidateID: r.CandidateID, Ballot: r.Ballot, PrincipalID: r.PrincipalID, ClientEventID: r.EventID, ReceivedAt: r.ReceivedAt}
}

// AppendExportLine appends r's line to b, newline included: its fields in
// the order seq, event_id, poll_id, candidate_id, principal_id,
// received_at, recorded_at, leaf_index, those it does not carry left out,
// no space, times in TimeFormat. A row with a Ballot has "ballot" in
// candidate_id's place, its value the canonical ballot as it is (an array
// or an object, not a string).
func AppendExportLine(b []byte, r ExportRow) []byte {
	if r.Definition != nil {
		return appendDefinitionLine(b, r)
	}
	b = append(b, '{')
	if r.Seq != 0 {
		b = append(b, `"seq":`...)
		b = strconv.AppendInt(b, r.Seq, 10)
		b = append(b, ',')
	}
	for i, f := range [4]struct{ k, v string }{
		{"event_id", r.EventID}, {"poll_id", r.PollID}, {"candidate_id", r.CandidateID}, {"principal_id", r.PrincipalID},
	} {
		if i > 0 {
			b = append(b, ',')
		}
		if f.k == "candidate_id" && r.Ballot != "" {
			b = append(b, `"ballot":`...)
			b = append(b, r.Ballot...)
			continue
		}
		b = append(b, '"')
		b = append(b, f.k...)
		b = append(b, `":`...)
		b = appendJSONString(b, f.v)
	}
	for _, f := range [2]struct {
		k string
		t time.Time
	}{{"received_at", r.ReceivedAt}, {"recorded_at", r.RecordedAt}} {
		if !f.t.IsZero() {
			b = append(b, `,"`...)
			b = append(b, f.k...)
			b = append(b, `":"`...)
			b = f.t.UTC().AppendFormat(b, TimeFormat)
			b = append(b, '"')
		}
	}
	if r.LeafIndex != nil {
		b = append(b, `,"leaf_index":`...)
		b = strconv.AppendInt(b, *r.LeafIndex, 10)
	}
	return append(b, '}', '\n')
}

// MarshalJSON is r's export line without its newline, so that a
// json.Encoder writes the line AppendExportLine does.
func (r ExportRow) MarshalJSON() ([]byte, error) {
	b := AppendExportLine(nil, r)
	return b[:len(b)-1], nil
}

// appendJSONString appends s as a JSON string. Ids need no escaping (they
// are [A-Za-z0-9_-]); anything else is escaped as encoding/json does.
func appendJSONString(b []byte, s string) []byte {
	if vote.ValidID(s) {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	q, _ := json.Marshal(s)
	return append(b, q...)
}

// exportFields are the keys of an export line, each spelt exactly.
var exportFields = map[string]bool{
	"seq": true, "event_id": true, "poll_id": true, "candidate_id": true, "ballot": true, "principal_id": true,
	"received_at": true, "recorded_at": true, "leaf_index": true,
}

// ParseExportLine reads one line of an export strictly: one JSON object,
// nothing after it; keys spelt exactly (not matched regardless of case, as
// encoding/json would), none twice, none unknown (a line of a kind this
// version does not know is refused, never read as a vote); the ids
// present and valid, and either candidate_id or a ballot, written
// exactly in its canonical form; seq, when given, from 1, and leaf_index from 0, both
// below 2^63; times RFC 3339 with at most six fractional digits (finer
// would be lost in the ledger, and the leaf is of microseconds). A null
// received_at, recorded_at or leaf_index is as if the line did not carry
// it. Its errors say what is wrong with the line; the caller adds where.
func ParseExportLine(line []byte) (ExportRow, error) {
	if r, ok := parseWritten(line); ok {
		return r, nil
	}
	return parseStrict(line)
}

// parseStrict is ParseExportLine for any line: a JSON token at a time,
// saying what is wrong.
func parseStrict(line []byte) (ExportRow, error) {
	var r ExportRow
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	tok, err := dec.Token()
	if errors.Is(err, io.EOF) {
		return r, errors.New("the line is empty; each line must be one JSON object")
	}
	if d, ok := tok.(json.Delim); err != nil || !ok || d != '{' {
		return r, errors.New("the line is not a JSON object; each line must be one object like tally export writes")
	}
	fields, err := decodeFields(dec)
	if err != nil {
		return r, err
	}
	if _, err := dec.Token(); err != nil {
		return r, fmt.Errorf("malformed JSON: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return r, errors.New("data follows the JSON object; each line must hold exactly one object")
	}
	if slices.ContainsFunc(fields, func(f jsonField) bool { return f.key == "kind" }) {
		return parseDefinitionLine(fields)
	}
	for _, f := range fields {
		key, raw := f.key, f.raw
		if !exportFields[key] {
			return r, fmt.Errorf("unknown field %q; the fields of a vote's line are seq, event_id, poll_id, candidate_id or ballot, principal_id, received_at, recorded_at "+
				"and leaf_index, spelt exactly, and a definition's carries \"kind\":\"definition\" (docs/audit.md, \"The export\")", key)
		}
		if err := r.setField(key, raw); err != nil {
			return r, err
		}
	}
	return r, r.checkIDs()
}

// jsonField is one key of an object with its value.
type jsonField struct {
	key string
	raw json.RawMessage
}

// decodeFields reads the key-value pairs of the object dec is in, in
// order, up to its closing brace, refusing a key given twice.
func decodeFields(dec *json.Decoder) ([]jsonField, error) {
	var fields []jsonField
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("malformed JSON: %v", err)
		}
		key, _ := tok.(string)
		if seen[key] {
			return nil, fmt.Errorf("field %q is given twice", key)
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("malformed JSON: %v", err)
		}
		fields = append(fields, jsonField{key, raw})
	}
	return fields, nil
}

// setField sets the field key of r from its value raw.
func (r *ExportRow) setField(key string, raw json.RawMessage) error {
	null := string(raw) == "null"
	switch key {
	case "seq":
		n, err := wholeField(key, raw)
		if err == nil && n < 1 {
			err = fmt.Errorf("field %q is %d: %s", key, n, wholeFields[key])
		}
		r.Seq = n
		return err
	case "leaf_index":
		if null {
			return nil
		}
		n, err := wholeField(key, raw)
		if err == nil && n < 0 {
			err = fmt.Errorf("field %q is %d: %s", key, n, wholeFields[key])
		}
		r.LeafIndex = &n
		return err
	case "ballot":
		return r.setBallot(raw)
	case "received_at", "recorded_at":
		if null {
			return nil
		}
		t, err := timeField(key, raw)
		if key == "received_at" {
			r.ReceivedAt = t
		} else {
			r.RecordedAt = t
		}
		return err
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil || null {
		return fmt.Errorf("field %q must be a string", key)
	}
	switch key {
	case "event_id":
		r.EventID = s
	case "poll_id":
		r.PollID = s
	case "candidate_id":
		r.CandidateID = s
	case "principal_id":
		r.PrincipalID = s
	}
	return nil
}

// setBallot sets r's ballot from the value raw of its "ballot" field,
// which must be a ballot's canonical form, byte for byte.
func (r *ExportRow) setBallot(raw json.RawMessage) error {
	s := string(raw)
	if len(s) == 0 || s[0] != '[' && s[0] != '{' {
		return fmt.Errorf("field \"ballot\" is %s: a vote's ballot is an array or an object in canonical form (docs/audit.md, \"A vote's line\"); "+
			"a vote of one choice carries candidate_id instead", quoteShort(s))
	}
	if len(s) > vote.MaxCanonicalLen || !vote.ValidCanonical(s) {
		for _, k := range vote.Kinds[1:] {
			if b, err := vote.ParseBallot(k, raw); err == nil && len(b.Canonical()) <= vote.MaxCanonicalLen && vote.ValidCanonical(b.Canonical()) {
				return fmt.Errorf("field \"ballot\" is %s, not in canonical form: as a %s ballot it is written %s, byte for byte", quoteShort(s), k, quoteShort(b.Canonical()))
			}
		}
		return fmt.Errorf("field \"ballot\" is %s, which is no ballot in canonical form: %s, or %s, with no space (docs/audit.md, \"A vote's line\")",
			quoteShort(s), vote.Shape(vote.KindMultiple), vote.Shape(vote.KindScore))
	}
	r.Ballot = s
	return nil
}

// checkIDs checks that every id of r is present and valid, and that it
// has a candidate_id or a ballot, not both.
func (r ExportRow) checkIDs() error {
	if r.Ballot != "" && r.CandidateID != "" {
		return errors.New("the line has both candidate_id and ballot: a vote of one choice carries candidate_id, any other a ballot")
	}
	cand := "candidate_id"
	if r.Ballot != "" {
		cand = ""
	}
	for _, f := range []struct{ name, v string }{
		{"event_id", r.EventID}, {"poll_id", r.PollID}, {cand, r.CandidateID}, {"principal_id", r.PrincipalID},
	} {
		if f.name == "" {
			continue
		}
		if f.v == "" && f.name == "candidate_id" {
			return errors.New("field \"candidate_id\" is missing or empty, and there is no ballot: a vote's line carries one of them")
		}
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
// is.
var wholeFields = map[string]string{
	"seq":        "a seq is a whole number from 1",
	"leaf_index": "a leaf index is a whole number from 0",
}

// wholeField reads the whole number raw, the value of key, saying what is
// wrong with one that is not an int64: out of range, not whole, not a
// number.
func wholeField(key string, raw json.RawMessage) (int64, error) {
	var n int64
	if err := json.Unmarshal(raw, &n); err == nil && string(raw) != "null" {
		return n, nil
	}
	lit := string(bytes.TrimSpace(raw))
	what := wholeFields[key]
	if lit == "" || lit[0] != '-' && (lit[0] < '0' || lit[0] > '9') {
		return 0, fmt.Errorf("field %q must be a whole number: %s", key, what)
	}
	fix := fmt.Sprintf("%s to %d (2^63-1); correct it, or leave %s out", what, int64(math.MaxInt64), key)
	f, _, err := big.ParseFloat(lit, 10, 0, big.ToZero)
	if err == nil && (f.Cmp(new(big.Float).SetInt64(math.MaxInt64)) > 0 || f.Cmp(new(big.Float).SetInt64(math.MinInt64)) < 0) {
		return 0, fmt.Errorf("field %q is %s, out of range: %s", key, lit, fix)
	}
	return 0, fmt.Errorf("field %q is %s, not a whole number written in digits: %s", key, lit, fix)
}

// timeField reads the RFC 3339 time raw, the value of key, refusing more
// than six fractional digits and an instant before 1970-01-01T00:00:00Z.
func timeField(key string, raw json.RawMessage) (time.Time, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return time.Time{}, fmt.Errorf("field %q must be a string holding an RFC 3339 time", key)
	}
	m := rfc3339.FindStringSubmatch(s)
	var t time.Time
	var err error
	if m != nil {
		t, err = time.Parse(time.RFC3339Nano, s)
	}
	if m == nil || err != nil || m[3] != "Z" && (m[3][1:3] > "23" || m[3][4:6] > "59") {
		return time.Time{}, fmt.Errorf("field %q is %q: it must be an RFC 3339 time, such as %s", key, s, exampleTime)
	}
	if t.Before(unixEpoch) {
		return time.Time{}, fmt.Errorf("field %q is %q, before 1970-01-01T00:00:00Z: no vote or poll of a log is that old, "+
			"and the zero time some readers take for \"no time\" is among them; give the time itself, such as %s", key, s, exampleTime)
	}
	if digits := len(m[2]); digits > 6 {
		return time.Time{}, fmt.Errorf("field %q is %q, with %d fractional digits: times are kept to the microsecond, "+
			"so give at most six, such as %s", key, s, digits, exampleTime)
	}
	return t, nil
}

// rfc3339 is the form of an RFC 3339 time (section 5.6, with T and Z in
// capitals): its fractional digits (2) and its offset when not Z (3).
// Go's time.Parse also takes a comma before the fraction and offsets past
// 23:59, which RFC 3339 does not.
var rfc3339 = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.(\d+))?(Z|[+-]\d{2}:\d{2})$`)

// unixEpoch is the earliest time read: 1970-01-01T00:00:00Z.
var unixEpoch = time.Unix(0, 0)

// exampleTime is a time as TimeFormat writes it.
const exampleTime = "2026-12-02T07:00:00.123456Z"
