package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/tlog"

	"tally/vote"
)

// This file owns the leaf of version 2: a poll's definition, committed in
// its own log (docs/audit.md, "The definition leaf"). A poll's log starts
// with its definition, and every change that matters to the count (the
// poll closed, or closing earlier) appends the whole definition again. A
// vote is checked against the last definition before its leaf: its
// choice offered, its received_at in the open window. A log written
// before definitions were logged starts with votes, which no definition
// covers.

// DefinitionVersion is the first byte of a definition leaf.
const DefinitionVersion = 2

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
	Choices      []string   // candidate ids, in display order
	Rules        vote.Rules // the ballot's kind and parameters and the answers mode; zero: vote.Single
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
func EncodeDefinition(dst []byte, d Definition) ([]byte, error) {
	if err := d.Check(); err != nil {
		return nil, err
	}
	dst = append(dst, DefinitionVersion, byte(len(d.PollID)))
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
	return dst, nil
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
	return nil
}

// DecodeDefinition reads a leaf EncodeDefinition wrote. It refuses
// another version, bytes cut short or left over, and a definition Check
// refuses.
func DecodeDefinition(b []byte) (Definition, error) {
	var d Definition
	if len(b) == 0 || b[0] != DefinitionVersion {
		return d, errors.New("definition: not a version 2 leaf")
	}
	r := bytes.NewReader(b[1:])
	short := errors.New("definition: cut short")
	n, err := r.ReadByte()
	if err != nil {
		return d, short
	}
	id := make([]byte, n)
	if _, err := r.Read(id); err != nil || len(id) == 0 && n > 0 {
		return d, short
	}
	d.PollID = string(id)
	var tn uint16
	if binary.Read(r, binary.BigEndian, &tn) != nil {
		return d, short
	}
	title := make([]byte, tn)
	if m, _ := r.Read(title); m != int(tn) {
		return d, short
	}
	d.Title = string(title)
	var micros int64
	if binary.Read(r, binary.BigEndian, &micros) != nil {
		return d, short
	}
	d.OpensAt = time.UnixMicro(micros).UTC()
	switch flag, err := r.ReadByte(); {
	case err != nil:
		return d, short
	case flag == 1:
		if binary.Read(r, binary.BigEndian, &micros) != nil {
			return d, short
		}
		t := time.UnixMicro(micros).UTC()
		d.ClosesAt = &t
	case flag != 0:
		return d, fmt.Errorf("definition: closes_at flag %d is neither 0 nor 1", flag)
	}
	switch flag, err := r.ReadByte(); {
	case err != nil:
		return d, short
	case flag == 1:
		var h [32]byte
		if m, _ := r.Read(h[:]); m != 32 {
			return d, short
		}
		d.EligibleHash = &h
	case flag != 0:
		return d, fmt.Errorf("definition: eligibility flag %d is neither 0 nor 1", flag)
	}
	var cn uint16
	if binary.Read(r, binary.BigEndian, &cn) != nil {
		return d, short
	}
	for range cn {
		n, err := r.ReadByte()
		if err != nil {
			return d, short
		}
		c := make([]byte, n)
		if m, _ := r.Read(c); m != int(n) {
			return d, short
		}
		d.Choices = append(d.Choices, string(c))
	}
	if r.Len() != 0 {
		return d, fmt.Errorf("definition: %d bytes are left over", r.Len())
	}
	return d, d.Check()
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

// Refuses says why d does not take a vote for candidate received at
// received, or "" when it does: the choice is not offered, or the vote was
// received before the poll opened or from its closing on.
func (d Definition) Refuses(candidate string, received time.Time) string {
	if k := d.Rules.Kind; k != "" && k != vote.KindSingle {
		b, err := vote.ParseCanonical(k, candidate)
		if err == nil {
			err = d.Rules.Check(d.Choices, b)
		}
		if err != nil {
			return fmt.Sprintf("the ballot %s is not one the poll's definition in force takes: %v", candidate, err)
		}
	} else if !slices.Contains(d.Choices, candidate) {
		return fmt.Sprintf("the vote is for %s, which the poll's definition in force does not offer", candidate)
	}
	if received.Before(d.OpensAt) {
		return fmt.Sprintf("the vote was received at %s, before the poll opened at %s",
			received.UTC().Format(TimeFormat), d.OpensAt.UTC().Format(TimeFormat))
	}
	if d.ClosesAt != nil && !received.Before(*d.ClosesAt) {
		return fmt.Sprintf("the vote was received at %s, once the poll had closed at %s",
			received.UTC().Format(TimeFormat), d.ClosesAt.UTC().Format(TimeFormat))
	}
	return ""
}

// Follows says why d may not follow prev in a poll's log, and the field
// that changed, or "" when it may: a later definition changes only the
// closing time, and only to close earlier (or at all), as tally poll
// close does. Anything else (another choice, title, opening or
// eligibility, a later closing) is a change to the question after it was
// asked.
func (d Definition) Follows(prev Definition) (field, why string) {
	switch {
	case d.PollID != prev.PollID:
		return "poll_id", fmt.Sprintf("the definition is of poll %s, in poll %s's log", d.PollID, prev.PollID)
	case d.Title != prev.Title:
		return "title", "the definition changes the poll's title"
	case !d.OpensAt.Equal(prev.OpensAt):
		return "opens_at", "the definition changes when the poll opens"
	case !slices.Equal(d.Choices, prev.Choices):
		return "choices", "the definition changes the poll's choices"
	case (d.EligibleHash == nil) != (prev.EligibleHash == nil) || d.EligibleHash != nil && *d.EligibleHash != *prev.EligibleHash:
		return "eligible_hash", "the definition changes who may vote"
	case d.ClosesAt == nil && prev.ClosesAt != nil:
		return "closes_at", "the definition reopens a closed poll"
	case d.ClosesAt != nil && prev.ClosesAt != nil && d.ClosesAt.After(*prev.ClosesAt):
		return "closes_at", "the definition closes the poll later than the one before it"
	}
	return "", ""
}
