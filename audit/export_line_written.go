package audit

import (
	"bytes"
	"strconv"
	"time"

	"tally/vote"
)

// This file owns the fast path of ParseExportLine (export_line.go): a
// line exactly as AppendExportLine writes a vote's row, read a field at a
// time by its literal keys, with no JSON tokenizer. Any other line,
// definitions' included, goes to the strict reading.

// parseWritten reads line when it is exactly as AppendExportLine writes a
// valid row, and reports false for anything else, which parseStrict then
// reads (or refuses, saying why). It is the fast path of an export that
// tally wrote: a field at a time by its literal key, with no JSON
// tokenizer, for the same row parseStrict would read.
func parseWritten(line []byte) (ExportRow, bool) {
	var r ExportRow
	b, ok := bytes.CutPrefix(line, []byte("{"))
	if !ok {
		return r, false
	}
	if rest, ok := bytes.CutPrefix(b, []byte(`"seq":`)); ok {
		if r.Seq, b, ok = cutWhole(rest); !ok || r.Seq < 1 {
			return r, false
		}
		if b, ok = bytes.CutPrefix(b, []byte(",")); !ok {
			return r, false
		}
	}
	for i, f := range [4]struct {
		key string
		dst *string
	}{{`"event_id":"`, &r.EventID}, {`"poll_id":"`, &r.PollID}, {`"candidate_id":"`, &r.CandidateID}, {`"principal_id":"`, &r.PrincipalID}} {
		if i > 0 {
			if b, ok = bytes.CutPrefix(b, []byte(",")); !ok {
				return r, false
			}
		}
		if b, ok = bytes.CutPrefix(b, []byte(f.key)); !ok {
			return r, false
		}
		end := bytes.IndexByte(b, '"')
		if end < 0 || !vote.ValidID(string(b[:end])) {
			return r, false
		}
		*f.dst, b = string(b[:end]), b[end+1:]
	}
	if b, ok = cutTimes(b, &r); !ok {
		return r, false
	}
	if rest, ok := bytes.CutPrefix(b, []byte(`,"leaf_index":`)); ok {
		n, rest, ok := cutWhole(rest)
		if !ok {
			return r, false
		}
		r.LeafIndex, b = &n, rest
	}
	if b, ok = bytes.CutPrefix(b, []byte("}")); !ok || len(bytes.Trim(b, " \t\r\n")) != 0 {
		return r, false
	}
	return r, true
}

// cutTimes cuts the optional received_at and recorded_at, in that order,
// off the front of b into r; false if one is there but not a time of the
// written form.
func cutTimes(b []byte, r *ExportRow) ([]byte, bool) {
	for _, f := range [2]struct {
		key string
		dst *time.Time
	}{{`,"received_at":"`, &r.ReceivedAt}, {`,"recorded_at":"`, &r.RecordedAt}} {
		rest, ok := bytes.CutPrefix(b, []byte(f.key))
		if !ok {
			continue
		}
		if len(rest) < len(exampleTime)+1 || rest[len(exampleTime)] != '"' {
			return b, false
		}
		t, err := time.Parse(TimeFormat, string(rest[:len(exampleTime)]))
		if err != nil || t.Before(unixEpoch) || t.Location() != time.UTC {
			return b, false
		}
		*f.dst, b = t, rest[len(exampleTime)+1:]
	}
	return b, true
}

// cutWhole cuts a whole number from 0 to 2^63-1 off the front of b, as
// JSON writes it (no sign, no leading zero), and returns the rest.
func cutWhole(b []byte) (int64, []byte, bool) {
	i := 0
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	if i == 0 || i > 1 && b[0] == '0' {
		return 0, b, false
	}
	n, err := strconv.ParseInt(string(b[:i]), 10, 64)
	if err != nil {
		return 0, b, false
	}
	return n, b[i:], true
}
