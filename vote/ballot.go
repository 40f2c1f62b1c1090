package vote

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// This file owns what a ballot is: the kinds a poll may ask for (Rules,
// fixed when the poll is created), a ballot's value read from JSON
// (ParseBallot), its canonical form (Ballot.Canonical, the text the stream
// carries, the ledger stores, the fingerprint binds and the log commits),
// and the check of a ballot against its poll (Rules.Check). Count, in
// count.go, folds ballots into a poll's figures.
//
// A single-choice ballot's canonical form is its choice id, so a vote of
// today's body ({"candidate_id":"a"}) and {"ballot":"a"} are one vote with
// one fingerprint. Every other canonical form is compact JSON: an array of
// ids ("multiple" sorted in byte order, "ranked" in order of preference) or
// an object whose keys, the choices marked, are in byte order ("approve":
// "yes", "no" or "abstain"; "score": an integer). Ids need no escaping in
// JSON, and a canonical form that starts with '[' or '{' is never an id,
// so the two never meet.

// Ballot is one ballot's value. Choices holds a single, multiple or ranked
// ballot's choices (multiple: in byte order once parsed; ranked: most
// preferred first); Marks an approve or score ballot's, in byte order of
// their choices.
type Ballot struct {
	Kind    Kind
	Choices []string
	Marks   []Mark
}

// numNamed is how many choices b names: its Marks' for approve and score,
// its Choices' for the other kinds.
func (b Ballot) numNamed() int {
	if len(b.Marks) > 0 {
		return len(b.Marks)
	}
	return len(b.Choices)
}

// namedAt is the jth choice b names (numNamed).
func (b Ballot) namedAt(j int) string {
	if len(b.Marks) > 0 {
		return b.Marks[j].Choice
	}
	return b.Choices[j]
}

// namesBefore reports whether b names c before its jth choice.
func (b Ballot) namesBefore(c string, j int) bool {
	for i := range j {
		if b.namedAt(i) == c {
			return true
		}
	}
	return false
}

// Mark is one choice of an approve or score ballot: Value is the score, or
// for approve one of ApproveYes, ApproveNo, ApproveAbstain.
type Mark struct {
	Choice string
	Value  int
}

// The values of an approve Mark.
const (
	ApproveYes = iota
	ApproveNo
	ApproveAbstain
)

var approveWords = [...]string{ApproveYes: Yes, ApproveNo: No, ApproveAbstain: Abstain}

// ShapeError is a ballot whose JSON is not the shape its kind takes: the
// request is wrong, whatever the poll (HTTP 400).
type ShapeError struct{ Reason string }

func (e *ShapeError) Error() string { return e.Reason }

func shapeErr(format string, args ...any) error {
	return &ShapeError{Reason: fmt.Sprintf(format, args...)}
}

// Shape says in words what a ballot of kind k looks like in JSON.
func Shape(k Kind) string {
	switch k {
	case KindMultiple:
		return `an array of choice ids, ["a","c"]`
	case KindApprove:
		return `an object of choice ids to "yes", "no" or "abstain", {"a":"yes","b":"no"}`
	case KindScore:
		return `an object of choice ids to whole-number scores, {"a":3,"b":0}`
	case KindRanked:
		return `an array of choice ids, most preferred first, ["c","a","b"]`
	}
	return `one choice id, "a"`
}

// ParseBallot reads a ballot of kind k from one JSON value, spelled any way
// JSON allows. It refuses, with a *ShapeError, what is not the kind's
// shape: another JSON type, an id outside the id rule, a key twice, a mark
// other than yes/no/abstain, a score that is not a whole number, anything
// after the value. It does not check the ballot against its poll: that is
// Rules.Check. Choices and marks come back in canonical order.
//
// A ballot spelled compactly, as clients send them, is read by the
// scanner (scanBallot), the rest by encoding/json's reader
// (parseBallotJSON), which also says what is wrong; FuzzScanBallot holds
// the two to the same answers.
func ParseBallot(k Kind, raw []byte) (Ballot, error) {
	if b, ok := scanBallot(k, raw); ok {
		return b, nil
	}
	return parseBallotJSON(k, raw)
}

// parseBallotJSON is ParseBallot with encoding/json's reader.
func parseBallotJSON(k Kind, raw []byte) (Ballot, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	b := Ballot{Kind: k}
	var err error
	switch k {
	case KindSingle:
		var s string
		s, err = stringToken(dec, k)
		b.Choices = []string{s}
	case KindMultiple, KindRanked:
		b.Choices, err = parseIDArray(dec, k)
	case KindApprove, KindScore:
		b.Marks, err = parseMarks(dec, k)
	default:
		return Ballot{}, shapeErr("ballot kind %q is not known", k)
	}
	if err != nil {
		return Ballot{}, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Ballot{}, shapeErr("the ballot goes on after its value: send %s", Shape(k))
	}
	b.sort()
	return b, nil
}

func (b *Ballot) sort() {
	if b.Kind == KindMultiple {
		slices.Sort(b.Choices)
	}
	slices.SortFunc(b.Marks, func(x, y Mark) int { return strings.Compare(x.Choice, y.Choice) })
}

func stringToken(dec *json.Decoder, k Kind) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", shapeErr("the ballot is not valid JSON: send %s", Shape(k))
	}
	s, ok := tok.(string)
	if !ok {
		return "", shapeErr("the ballot holds %s where a choice id goes: send %s", tokenKind(tok), Shape(k))
	}
	if !ValidID(s) {
		return "", shapeErr("the ballot's choice %s is not an id: choice ids are %s", quoteShort(s), IDRule)
	}
	return s, nil
}

func parseIDArray(dec *json.Decoder, k Kind) ([]string, error) {
	if err := openDelim(dec, '[', k); err != nil {
		return nil, err
	}
	ids := []string{}
	for dec.More() {
		if len(ids) == MaxBallotChoices+1 {
			return nil, shapeErr("the ballot holds more than %d choices", MaxBallotChoices+1)
		}
		s, err := stringToken(dec, k)
		if err != nil {
			return nil, err
		}
		ids = append(ids, s)
	}
	_, err := dec.Token()
	if err != nil {
		return nil, shapeErr("the ballot is not valid JSON: send %s", Shape(k))
	}
	return ids, nil
}

func parseMarks(dec *json.Decoder, k Kind) ([]Mark, error) {
	if err := openDelim(dec, '{', k); err != nil {
		return nil, err
	}
	marks := []Mark{}
	seen := map[string]bool{}
	for dec.More() {
		if len(marks) == MaxBallotChoices+1 {
			return nil, shapeErr("the ballot marks more than %d choices", MaxBallotChoices+1)
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, shapeErr("the ballot is not valid JSON: send %s", Shape(k))
		}
		c, _ := tok.(string)
		if !ValidID(c) {
			return nil, shapeErr("the ballot's choice %s is not an id: choice ids are %s", quoteShort(c), IDRule)
		}
		if seen[c] {
			return nil, shapeErr("the ballot marks choice %q twice: give each choice once", c)
		}
		seen[c] = true
		tok, err = dec.Token()
		if err != nil {
			return nil, shapeErr("the ballot is not valid JSON: send %s", Shape(k))
		}
		v, err := markValue(tok, c, k)
		if err != nil {
			return nil, err
		}
		marks = append(marks, Mark{Choice: c, Value: v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, shapeErr("the ballot is not valid JSON: send %s", Shape(k))
	}
	return marks, nil
}

func markValue(tok json.Token, c string, k Kind) (int, error) {
	if k == KindApprove {
		s, _ := tok.(string)
		if i := slices.Index(approveWords[:], s); i >= 0 {
			return i, nil
		}
		return 0, shapeErr("the ballot marks choice %q with %s: a mark is \"yes\", \"no\" or \"abstain\"", c, tokenKind(tok))
	}
	n, ok := tok.(json.Number)
	if !ok {
		return 0, shapeErr("the ballot scores choice %q with %s: a score is a whole number", c, tokenKind(tok))
	}
	v, err := strconv.ParseInt(string(n), 10, 32)
	if err != nil {
		return 0, shapeErr("the ballot scores choice %q with %s: a score is a whole number from 0 to the poll's max_score", c, quoteShort(string(n)))
	}
	if v < 0 {
		return 0, shapeErr("the ballot scores choice %q with %d: a score is 0 or more", c, v)
	}
	return int(v), nil
}

func openDelim(dec *json.Decoder, d json.Delim, k Kind) error {
	tok, err := dec.Token()
	if err != nil {
		return shapeErr("the ballot is not valid JSON: send %s", Shape(k))
	}
	if got, ok := tok.(json.Delim); !ok || got != d {
		return shapeErr("%s ballot is %s, not %s", k.A(), Shape(k), tokenKind(tok))
	}
	return nil
}

func tokenKind(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		if v == '[' {
			return "an array"
		}
		return "an object"
	case string:
		return "the string " + quoteShort(v)
	case json.Number:
		return "the number " + quoteShort(string(v))
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return "a value"
}

func quoteShort(s string) string {
	if len(s) > 70 {
		s = s[:64] + "..."
	}
	return strconv.Quote(s)
}

// Canonical is b's canonical form (this file's doc). b must come from
// ParseBallot or ParseCanonical, which put it in canonical order.
func (b Ballot) Canonical() string {
	if b.Kind == KindSingle {
		return b.Choices[0]
	}
	var sb strings.Builder
	switch b.Kind {
	case KindMultiple, KindRanked:
		sb.WriteByte('[')
		for i, c := range b.Choices {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(`"` + c + `"`)
		}
		sb.WriteByte(']')
	default:
		sb.WriteByte('{')
		for i, m := range b.Marks {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(`"` + m.Choice + `":`)
			if b.Kind == KindApprove {
				sb.WriteString(`"` + approveWords[m.Value] + `"`)
			} else {
				sb.WriteString(strconv.Itoa(m.Value))
			}
		}
		sb.WriteByte('}')
	}
	return sb.String()
}

// MaxCanonicalLen bounds a canonical ballot, above the longest a vote body
// (4 KiB) can carry. (An approve ballot of 64 choices of 64-byte ids all
// marked abstain would be 63 bytes longer; no vote body can hold it.)
const MaxCanonicalLen = 1 + MaxBallotChoices*(MaxIDLen+3+len(Abstain)+2) + 1

// ParseCanonical reads a ballot of kind k from its canonical form, and
// refuses any other spelling of it.
func ParseCanonical(k Kind, s string) (Ballot, error) {
	if len(s) > MaxCanonicalLen {
		return Ballot{}, shapeErr("a canonical ballot is at most %d bytes, this one %d", MaxCanonicalLen, len(s))
	}
	if k == KindSingle {
		if !ValidID(s) {
			return Ballot{}, shapeErr("a single-choice ballot is a choice id (%s), not %s", IDRule, quoteShort(s))
		}
		return Ballot{Kind: k, Choices: []string{s}}, nil
	}
	if b, ok := scanCanonical(k, s); ok {
		return b, nil
	}
	b, err := ParseBallot(k, []byte(s))
	if err != nil {
		return Ballot{}, err
	}
	if b.Canonical() != s {
		return Ballot{}, shapeErr("the ballot %s is not in canonical form: it is %s", quoteShort(s), quoteShort(b.Canonical()))
	}
	return b, nil
}

// ValidCanonical reports whether s is the canonical form of a ballot of
// some kind: what the stream can check of an entry without its poll. It
// reads s without making the ballot, and allocates nothing: the stream,
// the ledger and the log each ask it of every ballot. (What the scanner
// takes is what ParseCanonical takes of some kind: FuzzScanCanonical.)
func ValidCanonical(s string) bool {
	if ValidID(s) {
		return true
	}
	if len(s) > MaxCanonicalLen || s == "" {
		return false
	}
	switch s[0] {
	case '[': // ranked takes every array multiple does
		return walkIDs(s, nil)
	case '{': // an approve ballot's first value is quoted, a score's is not
		k := KindScore
		if i := strings.IndexByte(s, ':'); i > 0 && i+1 < len(s) && s[i+1] == '"' {
			k = KindApprove
		}
		return walkMarks(s, k, true, nil)
	}
	return false
}
