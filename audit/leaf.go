package audit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"tally/vote"
)

// LeafVersion is the first byte of a vote's leaf for one choice, the
// leaf of every vote of a single-choice poll. A change to the encoding
// gets a new version; a verifier refuses a version it does not know
// rather than guess.
const LeafVersion = 1

// BallotLeafVersion is the first byte of a vote's leaf that carries a
// ballot of another kind than single, in its canonical form.
const BallotLeafVersion = 4

// Leaf is what a ledger row contributes to its poll's log: the vote and
// when intake received it. The ledger's own sequence and recorded_at are
// left out, so that a ledger exported and imported elsewhere has the same
// leaves, and so the same roots.
type Leaf struct {
	PollID      string
	CandidateID string // the choice of a single-choice vote; empty when Ballot is set
	// Ballot is the canonical form (vote.Ballot.Canonical) of a ballot of
	// another kind than single, ["a","c"] or {"a":3}; empty for a vote of
	// one choice, which CandidateID holds.
	Ballot        string
	PrincipalID   string
	ClientEventID string
	ReceivedAt    time.Time
}

// EncodeLeaf appends the canonical encoding of l to dst (version 1):
//
//	0x01
//	len(poll_id)         1 byte, then poll_id
//	len(candidate_id)    1 byte, then candidate_id
//	len(principal_id)    1 byte, then principal_id
//	len(client_event_id) 1 byte, then client_event_id
//	received_at          8 bytes, big-endian two's complement: microseconds
//	                     since 1970-01-01T00:00:00Z
//
// Ids are 1 to vote.MaxIDLen bytes of vote.IDChars, so one length byte
// holds any of them; an id outside that rule is an error, not a leaf.
// received_at is truncated to the microsecond, PostgreSQL's precision.
//
// A leaf with a Ballot is of version 4 instead, the ballot in the
// candidate's place with a length of two bytes:
//
//	0x04
//	len(poll_id)         1 byte, then poll_id
//	len(ballot)          2 bytes big-endian, then the canonical ballot
//	len(principal_id)    1 byte, then principal_id
//	len(client_event_id) 1 byte, then client_event_id
//	received_at          8 bytes, as in version 1
//
// The ballot must be the canonical form of a ballot of some kind other
// than single (vote.ValidCanonical, and not an id: a vote of one choice
// is a version 1 leaf), at most vote.MaxCanonicalLen bytes. Whether it
// is a ballot its poll takes is for the definition in force to say.
func EncodeLeaf(dst []byte, l Leaf) ([]byte, error) {
	if l.Ballot != "" {
		return encodeBallotLeaf(dst, l)
	}
	dst = append(dst, LeafVersion)
	for _, f := range [...]struct{ name, v string }{
		{"poll_id", l.PollID}, {"candidate_id", l.CandidateID},
		{"principal_id", l.PrincipalID}, {"client_event_id", l.ClientEventID},
	} {
		var err error
		if dst, err = appendID(dst, f.name, f.v); err != nil {
			return nil, err
		}
	}
	return appendReceivedAt(dst, l.ReceivedAt)
}

// encodeBallotLeaf is EncodeLeaf of a leaf with a ballot: version 4.
func encodeBallotLeaf(dst []byte, l Leaf) ([]byte, error) {
	if l.CandidateID != "" {
		return nil, fmt.Errorf("leaf: it has both candidate_id %q and a ballot; a vote of one choice has a candidate_id, any other a ballot", l.CandidateID)
	}
	if err := checkLeafBallot(l.Ballot); err != nil {
		return nil, err
	}
	return appendBallotLeaf(dst, l)
}

// appendBallotLeaf is encodeBallotLeaf of a leaf whose ballot and
// candidate are already checked.
func appendBallotLeaf(dst []byte, l Leaf) ([]byte, error) {
	dst, err := appendID(append(dst, BallotLeafVersion), "poll_id", l.PollID)
	if err != nil {
		return nil, err
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(l.Ballot)))
	dst = append(dst, l.Ballot...)
	if dst, err = appendID(dst, "principal_id", l.PrincipalID); err != nil {
		return nil, err
	}
	if dst, err = appendID(dst, "client_event_id", l.ClientEventID); err != nil {
		return nil, err
	}
	return appendReceivedAt(dst, l.ReceivedAt)
}

// checkLeafBallot says what makes b no ballot a version 4 leaf holds.
func checkLeafBallot(b string) error {
	switch {
	case len(b) > vote.MaxCanonicalLen:
		return fmt.Errorf("leaf: the ballot is %d bytes; a canonical ballot is at most %d", len(b), vote.MaxCanonicalLen)
	case vote.ValidID(b):
		return fmt.Errorf("leaf: the ballot %q is one choice id: a vote of one choice is a version 1 leaf, with it as candidate_id", b)
	case !vote.ValidCanonical(b):
		return fmt.Errorf("leaf: the ballot %s is not a ballot in canonical form (docs/audit.md, \"The ballot leaf\")", quoteShort(b))
	}
	return nil
}

func appendID(dst []byte, name, v string) ([]byte, error) {
	if !vote.ValidID(v) {
		return nil, fmt.Errorf("leaf: %s %q is invalid: ids are "+vote.IDRule, name, v)
	}
	return append(append(dst, byte(len(v))), v...), nil
}

func appendReceivedAt(dst []byte, t time.Time) ([]byte, error) {
	if t.IsZero() {
		return nil, errors.New("leaf: received_at is not set")
	}
	return binary.BigEndian.AppendUint64(dst, uint64(t.UnixMicro())), nil
}

// quoteShort quotes s for a message, cut to its first 64 bytes.
func quoteShort(s string) string {
	if len(s) > 70 {
		return strconv.Quote(s[:64]) + "..."
	}
	return strconv.Quote(s)
}

// DecodeLeaf reads a vote's leaf EncodeLeaf wrote, of version 1 or 4.
// It refuses a version it does not know, an id outside the id rule, a
// ballot EncodeLeaf would refuse, and bytes left over.
func DecodeLeaf(b []byte) (Leaf, error) {
	if len(b) == 0 {
		return Leaf{}, errors.New("leaf: empty")
	}
	if b[0] != LeafVersion && b[0] != BallotLeafVersion {
		return Leaf{}, fmt.Errorf("leaf: version %d is not known (this verifier reads votes of versions %d and %d)", b[0], LeafVersion, BallotLeafVersion)
	}
	version := b[0]
	b = b[1:]
	var l Leaf
	for _, f := range [...]struct {
		name string
		dst  *string
	}{
		{"poll_id", &l.PollID}, {"candidate_id", &l.CandidateID},
		{"principal_id", &l.PrincipalID}, {"client_event_id", &l.ClientEventID},
	} {
		if f.name == "candidate_id" && version == BallotLeafVersion {
			if len(b) < 2 || len(b) < 2+int(binary.BigEndian.Uint16(b)) {
				return Leaf{}, errors.New("leaf: ballot is cut short")
			}
			n := 2 + int(binary.BigEndian.Uint16(b))
			l.Ballot, b = string(b[2:n]), b[n:]
			if err := checkLeafBallot(l.Ballot); err != nil {
				return Leaf{}, err
			}
			continue
		}
		if len(b) == 0 || len(b) < 1+int(b[0]) {
			return Leaf{}, fmt.Errorf("leaf: %s is cut short", f.name)
		}
		n := 1 + int(b[0]) // int: a byte would wrap at 255
		v := string(b[1:n])
		if !vote.ValidID(v) {
			return Leaf{}, fmt.Errorf("leaf: %s %q is invalid: ids are "+vote.IDRule, f.name, v)
		}
		*f.dst, b = v, b[n:]
	}
	if len(b) != 8 {
		return Leaf{}, fmt.Errorf("leaf: received_at takes 8 bytes, %d are left", len(b))
	}
	l.ReceivedAt = time.UnixMicro(int64(binary.BigEndian.Uint64(b))).UTC()
	return l, nil
}

// LeafHash is the hash of l's leaf in its poll's tree: SHA-256(0x00 ||
// EncodeLeaf(l)).
//
// It is tlog.RecordHash of the encoding, hashed from one buffer on the
// stack: the rebuild hashes every leaf of the ledger. A leaf with a
// ballot takes a buffer of its own, a ballot being up to
// vote.MaxCanonicalLen bytes.
func LeafHash(l Leaf) (tlog.Hash, error) {
	if l.Ballot != "" {
		return ballotLeafHash(l)
	}
	var buf [1 + 1 + 4*(1+vote.MaxIDLen) + 8]byte // 0x00, then the leaf
	b, err := EncodeLeaf(buf[1:1], l)
	if err != nil {
		return tlog.Hash{}, err
	}
	return sum256(buf[:1+len(b)]), nil
}

func ballotLeafHash(l Leaf) (tlog.Hash, error) {
	var buf [1 + 1 + 3*(1+vote.MaxIDLen) + 2 + vote.MaxCanonicalLen + 8]byte
	b, err := EncodeLeaf(buf[1:1], l)
	if err != nil {
		return tlog.Hash{}, err
	}
	return sum256(buf[:1+len(b)]), nil
}
