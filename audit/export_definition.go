package audit

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// This file owns the export's definition line (docs/audit.md, "The
// export"): a poll's definition leaf, at its place among the poll's
// votes, written and read as the vote's line is, in export_line.go.

// AppendExportLine's form of a definition line: the fields in the order
// kind, poll_id, title, opens_at, closes_at, eligible_hash, choices,
// recorded_at, leaf_index, those it does not carry left out (closes_at
// of a poll open until closed, eligible_hash of a poll any principal may
// answer), no space, times in TimeFormat.
func appendDefinitionLine(b []byte, r ExportRow) []byte {
	d := r.Definition
	b = append(b, `{"kind":"definition","poll_id":`...)
	b = appendJSONString(b, d.PollID)
	b = append(b, `,"title":`...)
	b = appendJSONString(b, d.Title)
	b = appendTimeField(b, "opens_at", d.OpensAt)
	if d.ClosesAt != nil {
		b = appendTimeField(b, "closes_at", *d.ClosesAt)
	}
	if d.EligibleHash != nil {
		b = append(b, `,"eligible_hash":"`...)
		b = hex.AppendEncode(b, d.EligibleHash[:])
		b = append(b, '"')
	}
	b = append(b, `,"choices":[`...)
	for i, c := range d.Choices {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, c)
	}
	b = append(b, ']')
	if !r.RecordedAt.IsZero() {
		b = appendTimeField(b, "recorded_at", r.RecordedAt)
	}
	if r.LeafIndex != nil {
		b = append(b, `,"leaf_index":`...)
		b = strconv.AppendInt(b, *r.LeafIndex, 10)
	}
	return append(b, '}', '\n')
}

func appendTimeField(b []byte, key string, t time.Time) []byte {
	b = append(b, `,"`...)
	b = append(b, key...)
	b = append(b, `":"`...)
	b = t.UTC().AppendFormat(b, TimeFormat)
	return append(b, '"')
}

// definitionFields are the keys of a definition line.
var definitionFields = map[string]bool{
	"kind": true, "poll_id": true, "title": true, "opens_at": true, "closes_at": true,
	"eligible_hash": true, "choices": true, "recorded_at": true, "leaf_index": true,
}

// parseDefinitionLine reads the fields of a line that carries a kind: a
// definition line, with the same strictness as a vote's line; kind,
// poll_id, title, opens_at and choices are required.
func parseDefinitionLine(fields []jsonField) (ExportRow, error) {
	var r ExportRow
	d := &Definition{}
	given := map[string]bool{}
	for _, f := range fields {
		if !definitionFields[f.key] {
			return r, fmt.Errorf("unknown field %q in a definition line; its fields are kind, poll_id, title, opens_at, closes_at, "+
				"eligible_hash, choices, recorded_at and leaf_index, spelt exactly (docs/audit.md, \"The export\")", f.key)
		}
		given[f.key] = string(f.raw) != "null"
		if !given[f.key] {
			continue
		}
		if err := setDefinitionField(&r, d, f); err != nil {
			return r, err
		}
	}
	for _, key := range []string{"poll_id", "title", "opens_at", "choices"} {
		if !given[key] {
			return r, fmt.Errorf("field %q is missing; a definition line carries kind, poll_id, title, opens_at and choices", key)
		}
	}
	if err := d.Check(); err != nil {
		return r, err
	}
	r.PollID, r.Definition = d.PollID, d
	return r, nil
}

// setDefinitionField sets the field f of a definition line.
func setDefinitionField(r *ExportRow, d *Definition, f jsonField) error {
	switch f.key {
	case "leaf_index":
		n, err := wholeField(f.key, f.raw)
		if err == nil && n < 0 {
			err = fmt.Errorf("field %q is %d: %s", f.key, n, wholeFields[f.key])
		}
		r.LeafIndex = &n
		return err
	case "opens_at", "closes_at", "recorded_at":
		t, err := timeField(f.key, f.raw)
		switch f.key {
		case "opens_at":
			d.OpensAt = t
		case "closes_at":
			d.ClosesAt = &t
		default:
			r.RecordedAt = t
		}
		return err
	case "choices":
		if err := json.Unmarshal(f.raw, &d.Choices); err != nil {
			return fmt.Errorf("field %q must be an array of candidate ids", f.key)
		}
		return nil
	}
	var s string
	if err := json.Unmarshal(f.raw, &s); err != nil {
		return fmt.Errorf("field %q must be a string", f.key)
	}
	switch f.key {
	case "kind":
		if s != "definition" {
			return fmt.Errorf("field \"kind\" is %q: this version reads kind \"definition\" only; a line of another kind is refused, never read as a vote", s)
		}
	case "poll_id":
		d.PollID = s
	case "title":
		d.Title = s
	case "eligible_hash":
		h, err := hex.DecodeString(s)
		if err != nil || len(h) != 32 || hex.EncodeToString(h) != s {
			return fmt.Errorf("field \"eligible_hash\" is %q: it must be 64 lowercase hexadecimal digits, the SHA-256 of the eligible list", s)
		}
		d.EligibleHash = (*[32]byte)(h)
	}
	return nil
}
