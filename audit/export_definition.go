package audit

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"tally/vote"
)

// This file owns the export's definition line (docs/audit.md, "The
// export"): a poll's definition leaf, at its place among the poll's
// votes, written and read as the vote's line is, in export_line.go.

// AppendExportLine's form of a definition line: the fields in the order
// kind, poll_id, title, opens_at, closes_at, eligible_hash, choices,
// ballot, answers, recorded_at, leaf_index, those it does not carry left
// out (closes_at of a poll open until closed, eligible_hash of a poll any
// principal may answer, ballot and answers of a poll whose rules are
// vote.Single's), no space, times in TimeFormat. ballot is an object of
// the keys kind, then min_choices and max_choices (multiple), or
// max_score and budget (score; budget left out when there is none).
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
	if rules := d.BallotRules(); !rules.IsDefault() {
		b = appendRules(b, rules)
	}
	if !r.RecordedAt.IsZero() {
		b = appendTimeField(b, "recorded_at", r.RecordedAt)
	}
	if r.LeafIndex != nil {
		b = append(b, `,"leaf_index":`...)
		b = strconv.AppendInt(b, *r.LeafIndex, 10)
	}
	return append(b, '}', '\n')
}

// appendRules appends the ballot and answers fields of a definition line.
func appendRules(b []byte, r vote.Rules) []byte {
	b = append(b, `,"ballot":{"kind":"`...)
	b = append(b, r.Kind...)
	b = append(b, '"')
	switch r.Kind {
	case vote.KindMultiple:
		b = strconv.AppendInt(append(b, `,"min_choices":`...), int64(r.MinChoices), 10)
		b = strconv.AppendInt(append(b, `,"max_choices":`...), int64(r.MaxChoices), 10)
	case vote.KindScore:
		b = strconv.AppendInt(append(b, `,"max_score":`...), int64(r.MaxScore), 10)
		if r.Budget != 0 {
			b = strconv.AppendInt(append(b, `,"budget":`...), int64(r.Budget), 10)
		}
	}
	b = append(b, `},"answers":"`...)
	b = append(b, r.Answers...)
	return append(b, '"')
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
	"eligible_hash": true, "choices": true, "ballot": true, "answers": true, "recorded_at": true, "leaf_index": true,
}

// parseDefinitionLine reads the fields of a line that carries a kind: a
// definition line, with the same strictness as a vote's line; kind,
// poll_id, title, opens_at and choices are required, and ballot and
// answers go together: both, for rules other than vote.Single's, or
// neither.
func parseDefinitionLine(fields []jsonField) (ExportRow, error) {
	var r ExportRow
	d := &Definition{}
	given := map[string]bool{}
	for _, f := range fields {
		if !definitionFields[f.key] {
			return r, fmt.Errorf("unknown field %q in a definition line; its fields are kind, poll_id, title, opens_at, closes_at, "+
				"eligible_hash, choices, ballot, answers, recorded_at and leaf_index, spelt exactly (docs/audit.md, \"The export\")", f.key)
		}
		given[f.key] = string(f.raw) != "null"
		if !given[f.key] {
			if f.key != "recorded_at" && f.key != "leaf_index" {
				return r, fmt.Errorf("field %q is null: a definition line leaves out what the definition has not (closes_at of a poll open until "+
					"closed, eligible_hash of a poll any principal may answer, ballot and answers of the default rules); null is not read as none", f.key)
			}
			continue
		}
		if f.key == "ballot" || f.key == "answers" {
			continue // read once the choices are known
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
	if err := readRules(d, fields, given); err != nil {
		return r, err
	}
	if err := d.Check(); err != nil {
		return r, err
	}
	r.PollID, r.Definition = d.PollID, d
	return r, nil
}

// readRules sets d's rules from the ballot and answers fields of its
// line, when it has them: given both, of rules other than vote.Single's,
// each parameter its kind has written out (multiple: min_choices and
// max_choices; score: max_score, and budget unless there is none).
func readRules(d *Definition, fields []jsonField, given map[string]bool) error {
	if !given["ballot"] && !given["answers"] {
		return nil
	}
	if !given["ballot"] || !given["answers"] {
		return errors.New(`a definition line carries "ballot" and "answers" together (both for a poll whose ballot is not single with the first answer final, neither otherwise)`)
	}
	var spec vote.Spec
	for _, f := range fields {
		var err error
		switch f.key {
		case "answers":
			if err = json.Unmarshal(f.raw, &spec.Answers); err != nil {
				err = errors.New(`field "answers" must be a string, "final" or "latest"`)
			}
		case "ballot":
			err = readBallotSpec(f.raw, &spec)
		}
		if err != nil {
			return err
		}
	}
	rules, err := vote.NewRules(spec, len(d.Choices))
	if err != nil {
		return fmt.Errorf("field %q: %v", ruleField(err), err)
	}
	if rules.IsDefault() {
		return errors.New(`the definition's "ballot" and "answers" are the default (single, final): a line of a single-choice poll whose first answer is final leaves both out`)
	}
	d.Rules = rules
	return nil
}

// ballotSpecKeys are the keys of a definition line's ballot object, with
// the kind whose parameter each is.
var ballotSpecKeys = map[string]vote.Kind{
	"kind": "", "min_choices": vote.KindMultiple, "max_choices": vote.KindMultiple, "max_score": vote.KindScore, "budget": vote.KindScore,
}

// readBallotSpec reads a definition line's ballot object into spec,
// strictly: an object, its keys spelt exactly, none twice or unknown, the
// kind a string, each parameter a whole number, those tally writes for
// the kind all there.
func readBallotSpec(raw json.RawMessage, spec *vote.Spec) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return errors.New(`field "ballot" of a definition line must be an object such as {"kind":"multiple","min_choices":1,"max_choices":2}`)
	}
	fields, err := decodeFields(dec)
	if err != nil {
		return fmt.Errorf("field \"ballot\": %v", err)
	}
	params := map[string]*int{}
	for _, f := range fields {
		if _, ok := ballotSpecKeys[f.key]; !ok {
			return fmt.Errorf("unknown key %q in field \"ballot\"; its keys are kind, min_choices, max_choices, max_score and budget, spelt exactly", f.key)
		}
		if f.key == "kind" {
			if err := json.Unmarshal(f.raw, &spec.Kind); err != nil {
				return errors.New(`key "kind" of field "ballot" must be a string: multiple, approve, score or ranked`)
			}
			continue
		}
		var n int64
		if err := json.Unmarshal(f.raw, &n); err != nil || string(f.raw) == "null" || bytes.ContainsAny(f.raw, ".eE") {
			return fmt.Errorf("key %q of field \"ballot\" is %s: it must be a whole number in decimal digits", f.key, quoteShort(string(f.raw)))
		}
		if n < -1<<31 || n > 1<<31 {
			return fmt.Errorf("key %q of field \"ballot\" is %d, out of range", f.key, n)
		}
		v := int(n)
		params[f.key] = &v
	}
	spec.MinChoices, spec.MaxChoices, spec.MaxScore, spec.Budget = params["min_choices"], params["max_choices"], params["max_score"], params["budget"]
	if spec.Kind == "" {
		return errors.New(`field "ballot" has no "kind": give the ballot's kind, multiple, approve, score or ranked`)
	}
	if vote.Kind(spec.Kind) == vote.KindMultiple && (spec.MinChoices == nil || spec.MaxChoices == nil) {
		return errors.New(`a multiple ballot's definition line gives both "min_choices" and "max_choices" in its "ballot"`)
	}
	return nil
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
	if err := CheckJSONString(f.raw); err != nil {
		return fmt.Errorf("field %q %v: a JSON reader would read another title than the leaf holds; write the title in UTF-8", f.key, err)
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
