package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/tlog"

	"tally/vote"
)

// This file owns the leaves of versions 2 and 3: a poll's definition,
// committed in its own log (docs/audit.md, "The definition leaf"), version
// 3 being version 2 followed by the poll's ballot rules when they are not
// vote.Single's. A poll's log starts
// with its definition, and every change that matters to the count (the
// poll closed, or closing earlier) appends the whole definition again. A
// vote is checked against the last definition before its leaf: its
// choice offered, its received_at in the open window. A log written
// before definitions were logged starts with votes, which no definition
// covers.

// DefinitionVersion is the first byte of the definition leaf of a poll
// whose rules are vote.Single.
const DefinitionVersion = 2

// RulesDefinitionVersion is the first byte of the definition leaf of a
// poll with any other rules: version 2's fields, then the rules.
const RulesDefinitionVersion = 3

// The kind byte of a version 3 definition leaf, by vote.Kind.
var kindBytes = map[vote.Kind]byte{vote.KindSingle: 0, vote.KindMultiple: 1, vote.KindApprove: 2, vote.KindScore: 3, vote.KindRanked: 4}

// The answers byte of a version 3 definition leaf, by vote.Answers.
var answersBytes = map[vote.Answers]byte{vote.AnswersFinal: 0, vote.AnswersLatest: 1}

// MaxTitleLen is the longest title a definition leaf holds, in bytes.
const MaxTitleLen = 1<<16 - 1

// Definition is what a poll asks and when: everything that decides
// whether a vote counts, except who may vote, which it commits by hash.
type Definition struct {
	PollID   string
	Title    string
	OpensAt  time.Time
	ClosesAt *time.Time // nil: open until closed
	// EligibleHash is EligibleListHash of the principals a poll of
	// eligibility "list" takes votes from; nil: any principal may vote.
	EligibleHash *[32]byte
	Choices      []string // candidate ids, in display order
	// Rules are the poll's ballot kind, its parameters and its answers
	// mode, as vote.NewRules makes them; the zero value is vote.Single.
	Rules vote.Rules
}

// BallotRules are d's rules, vote.Single when d leaves them zero.
func (d Definition) BallotRules() vote.Rules {
	if d.Rules == (vote.Rules{}) {
		return vote.Single
	}
	return d.Rules
}

// EligibleListHash is the hash a definition holds for a list of eligible
// principals: SHA-256 over the distinct ids in byte order, each preceded
// by its length in one byte. Whoever holds the list can check it against
// the export without the export naming any voter.
func EligibleListHash(ids []string) [32]byte {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	h := sha256.New()
	for _, id := range ids {
		h.Write([]byte{byte(len(id))})
		h.Write([]byte(id))
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// EncodeDefinition appends the canonical encoding of d to dst (version 2):
//
//	0x02
//	len(poll_id)     1 byte, then poll_id
//	len(title)       2 bytes big-endian, then the title (UTF-8)
//	opens_at         8 bytes: microseconds since 1970-01-01T00:00:00Z
//	closes_at        0x00 (open until closed), or 0x01 and 8 bytes as opens_at
//	eligibility      0x00 (any principal), or 0x01 and the 32 bytes of
//	                 EligibleListHash
//	len(choices)     2 bytes big-endian, then each choice: 1 length byte
//	                 and its id
//
// A definition whose rules are not vote.Single (BallotRules) is of
// version 3 instead: 0x03, the fields of version 2, then
//
//	kind             1 byte: 0 single, 1 multiple, 2 approve, 3 score, 4 ranked
//	multiple:        min_choices, max_choices: 2 bytes big-endian each
//	score:           max_score, budget: 4 bytes big-endian each (budget 0: none)
//	answers          1 byte: 0 final, 1 latest
//
// (the other kinds have no parameter), so that the leaf of every poll
// that came before kinds stays the same bytes.
func EncodeDefinition(dst []byte, d Definition) ([]byte, error) {
	if err := d.Check(); err != nil {
		return nil, err
	}
	rules := d.BallotRules()
	version := byte(DefinitionVersion)
	if !rules.IsDefault() {
		version = RulesDefinitionVersion
	}
	dst = append(dst, version, byte(len(d.PollID)))
	dst = append(dst, d.PollID...)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(d.Title)))
	dst = append(dst, d.Title...)
	dst = binary.BigEndian.AppendUint64(dst, uint64(d.OpensAt.UnixMicro()))
	if d.ClosesAt == nil {
		dst = append(dst, 0)
	} else {
		dst = binary.BigEndian.AppendUint64(append(dst, 1), uint64(d.ClosesAt.UnixMicro()))
	}
	if d.EligibleHash == nil {
		dst = append(dst, 0)
	} else {
		dst = append(append(dst, 1), d.EligibleHash[:]...)
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(d.Choices)))
	for _, c := range d.Choices {
		dst = append(append(dst, byte(len(c))), c...)
	}
	if rules.IsDefault() {
		return dst, nil
	}
	dst = append(dst, kindBytes[rules.Kind])
	switch rules.Kind {
	case vote.KindMultiple:
		dst = binary.BigEndian.AppendUint16(dst, uint16(rules.MinChoices))
		dst = binary.BigEndian.AppendUint16(dst, uint16(rules.MaxChoices))
	case vote.KindScore:
		dst = binary.BigEndian.AppendUint32(dst, uint32(rules.MaxScore))
		dst = binary.BigEndian.AppendUint32(dst, uint32(rules.Budget))
	}
	return append(dst, answersBytes[rules.Answers]), nil
}

// Check reports what makes d no definition a leaf can hold: an id outside
// the id rule, an empty title or one not UTF-8 or past MaxTitleLen, no
// choice or one twice, a time not set, closing before opening.
func (d Definition) Check() error {
	if !vote.ValidID(d.PollID) {
		return fmt.Errorf("definition: poll_id %q is invalid: ids are "+vote.IDRule, d.PollID)
	}
	switch {
	case d.Title == "":
		return errors.New("definition: the title is empty")
	case len(d.Title) > MaxTitleLen:
		return fmt.Errorf("definition: the title is %d bytes, longer than %d", len(d.Title), MaxTitleLen)
	case !utf8.ValidString(d.Title):
		return errors.New("definition: the title is not UTF-8")
	case d.OpensAt.IsZero():
		return errors.New("definition: opens_at is not set")
	case d.ClosesAt != nil && d.ClosesAt.Before(d.OpensAt):
		return errors.New("definition: it closes before it opens")
	case len(d.Choices) == 0 || len(d.Choices) > 1<<16-1:
		return fmt.Errorf("definition: %d choices; a poll has 1 to %d", len(d.Choices), 1<<16-1)
	}
	seen := make(map[string]bool, len(d.Choices))
	for _, c := range d.Choices {
		if !vote.ValidID(c) {
			return fmt.Errorf("definition: choice %q is invalid: ids are "+vote.IDRule, c)
		}
		if seen[c] {
			return fmt.Errorf("definition: choice %q is given twice", c)
		}
		seen[c] = true
	}
	return checkRules(d.BallotRules(), len(d.Choices))
}

// checkRules says what makes r no rules of a poll of n choices: what
// vote.NewRules would refuse of the spec r was made from, or a parameter
// NewRules would not have set (one of another kind, a budget out of
// range).
func checkRules(r vote.Rules, n int) error {
	spec := vote.Spec{Kind: string(r.Kind), Answers: string(r.Answers)}
	switch r.Kind {
	case vote.KindMultiple:
		spec.MinChoices, spec.MaxChoices = &r.MinChoices, &r.MaxChoices
	case vote.KindScore:
		spec.MaxScore = &r.MaxScore
		if r.Budget != 0 {
			spec.Budget = &r.Budget
		}
	}
	if r.Kind == "" || r.Answers == "" {
		return fmt.Errorf("definition: its rules name no kind or no answers mode (%+v): give both, or leave the rules zero for a single-choice poll", r)
	}
	got, err := vote.NewRules(spec, n)
	if err != nil {
		return fmt.Errorf("definition: %s: %w", ruleField(err), err)
	}
	if got != r {
		return fmt.Errorf("definition: its rules %+v set a parameter its kind has not (a %s ballot's rules are %+v)", r, r.Kind, got)
	}
	return nil
}

// ruleField is the field a vote.RuleError names, "ballot" otherwise.
func ruleField(err error) string {
	var re *vote.RuleError
	if errors.As(err, &re) {
		return re.Field
	}
	return "ballot"
}

// DecodeDefinition reads a leaf EncodeDefinition wrote, of version 2 or
// 3. It refuses another version, bytes cut short or left over, a
// definition Check refuses, and a version 3 leaf of the rules vote.Single
// (whose leaf is of version 2: one definition has one encoding). A
// version 2 leaf's Rules are left zero.
func DecodeDefinition(b []byte) (Definition, error) {
	var d Definition
	if len(b) == 0 || b[0] != DefinitionVersion && b[0] != RulesDefinitionVersion {
		return d, errors.New("definition: not a version 2 or 3 leaf")
	}
	r := &fieldReader{r: bytes.NewReader(b[1:]), short: errors.New("definition: cut short")}
	d.PollID = string(r.bytes(int(r.byte())))
	d.Title = string(r.bytes(int(r.uint16())))
	d.OpensAt = time.UnixMicro(r.int64()).UTC()
	if r.flag("closes_at") {
		t := time.UnixMicro(r.int64()).UTC()
		d.ClosesAt = &t
	}
	if r.flag("eligibility") {
		d.EligibleHash = (*[32]byte)(r.bytes(32))
	}
	for range r.uint16() {
		d.Choices = append(d.Choices, string(r.bytes(int(r.byte()))))
	}
	if r.err != nil {
		return d, r.err
	}
	if b[0] == RulesDefinitionVersion {
		rules, err := decodeRules(r.r)
		if err != nil {
			return d, err
		}
		d.Rules = rules
	}
	if r.r.Len() != 0 {
		return d, fmt.Errorf("definition: %d bytes are left over", r.r.Len())
	}
	return d, d.Check()
}

// fieldReader reads a leaf's fixed-width fields in turn. Its first failure
// sticks: every later read gives zeros, and err says what went wrong, so
// a decoder reads all its fields and checks once.
type fieldReader struct {
	r     *bytes.Reader
	short error // the error of a read past the end
	err   error
}

func (f *fieldReader) bytes(n int) []byte {
	b := make([]byte, n)
	if f.err == nil {
		if _, err := io.ReadFull(f.r, b); err != nil {
			f.err = f.short
		}
	}
	return b
}

func (f *fieldReader) byte() byte { return f.bytes(1)[0] }

func (f *fieldReader) uint16() uint16 { return binary.BigEndian.Uint16(f.bytes(2)) }

func (f *fieldReader) uint32() uint32 { return binary.BigEndian.Uint32(f.bytes(4)) }

func (f *fieldReader) int64() int64 { return int64(binary.BigEndian.Uint64(f.bytes(8))) }

// flag reads a byte that says whether the optional field named follows: 1
// if it does, 0 if not; any other byte is an error.
func (f *fieldReader) flag(name string) bool {
	switch v := f.byte(); {
	case f.err != nil || v == 0:
		return false
	case v == 1:
		return true
	default:
		f.err = fmt.Errorf("definition: %s flag %d is neither 0 nor 1", name, v)
		return false
	}
}

func decodeRules(br *bytes.Reader) (vote.Rules, error) {
	r := &fieldReader{r: br, short: errors.New("definition: its rules are cut short")}
	var rules vote.Rules
	k := r.byte()
	if r.err != nil {
		return rules, r.err
	}
	for kind, v := range kindBytes {
		if v == k {
			rules.Kind = kind
		}
	}
	if rules.Kind == "" {
		return rules, fmt.Errorf("definition: ballot kind byte %d is not known (0 single, 1 multiple, 2 approve, 3 score, 4 ranked)", k)
	}
	switch rules.Kind {
	case vote.KindMultiple:
		rules.MinChoices, rules.MaxChoices = int(r.uint16()), int(r.uint16())
	case vote.KindScore:
		rules.MaxScore, rules.Budget = int(r.uint32()), int(r.uint32())
	}
	a := r.byte()
	if r.err != nil {
		return rules, r.err
	}
	for answers, v := range answersBytes {
		if v == a {
			rules.Answers = answers
		}
	}
	if rules.Answers == "" {
		return rules, fmt.Errorf("definition: answers byte %d is not known (0 final, 1 latest)", a)
	}
	if rules.IsDefault() {
		return rules, errors.New("definition: a version 3 leaf of the default rules (single, final), which is written as version 2: not canonical")
	}
	return rules, nil
}

// DefinitionHash is the hash of d's leaf in its poll's tree:
// SHA-256(0x00 || EncodeDefinition(d)).
func DefinitionHash(d Definition) (tlog.Hash, error) {
	b, err := EncodeDefinition(nil, d)
	if err != nil {
		return tlog.Hash{}, err
	}
	return tlog.RecordHash(b), nil
}
