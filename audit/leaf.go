package audit

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"tally/vote"
)

// LeafVersion is the first byte of every leaf this package writes. A
// change to the encoding gets a new version; a verifier refuses a version
// it does not know rather than guess.
const LeafVersion = 1

// Leaf is what a ledger row contributes to its poll's log: the vote and
// when intake received it. The ledger's own sequence and recorded_at are
// left out, so that a ledger exported and imported elsewhere has the same
// leaves, and so the same roots.
type Leaf struct {
	PollID        string
	CandidateID   string
	PrincipalID   string
	ClientEventID string
	ReceivedAt    time.Time
	Ballot        string // the canonical ballot of a poll of another kind than single; CandidateID is empty then
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
func EncodeLeaf(dst []byte, l Leaf) ([]byte, error) {
	if l.Ballot != "" {
		return encodeBallotLeaf(dst, l)
	}
	dst = append(dst, LeafVersion)
	for _, f := range [...]struct{ name, v string }{
		{"poll_id", l.PollID}, {"candidate_id", l.CandidateID},
		{"principal_id", l.PrincipalID}, {"client_event_id", l.ClientEventID},
	} {
		if !vote.ValidID(f.v) {
			return nil, fmt.Errorf("leaf: %s %q is invalid: ids are "+vote.IDRule, f.name, f.v)
		}
		dst = append(dst, byte(len(f.v)))
		dst = append(dst, f.v...)
	}
	if l.ReceivedAt.IsZero() {
		return nil, errors.New("leaf: received_at is not set")
	}
	return binary.BigEndian.AppendUint64(dst, uint64(l.ReceivedAt.UnixMicro())), nil
}

// DecodeLeaf reads a leaf EncodeLeaf wrote. It refuses a version it does
// not know, an id outside the id rule and bytes left over.
func DecodeLeaf(b []byte) (Leaf, error) {
	if len(b) == 0 {
		return Leaf{}, errors.New("leaf: empty")
	}
	if b[0] != LeafVersion {
		return Leaf{}, fmt.Errorf("leaf: version %d is not known (this verifier reads version %d)", b[0], LeafVersion)
	}
	b = b[1:]
	var l Leaf
	for _, f := range [...]struct {
		name string
		dst  *string
	}{
		{"poll_id", &l.PollID}, {"candidate_id", &l.CandidateID},
		{"principal_id", &l.PrincipalID}, {"client_event_id", &l.ClientEventID},
	} {
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
// stack: the rebuild hashes every leaf of the ledger.
func LeafHash(l Leaf) (tlog.Hash, error) {
	var buf [1 + 1 + 3*(1+vote.MaxIDLen) + 2 + vote.MaxCanonicalLen + 8]byte // 0x00, then the leaf
	b, err := EncodeLeaf(buf[1:1], l)
	if err != nil {
		return tlog.Hash{}, err
	}
	return sha256.Sum256(buf[:1+len(b)]), nil
}

// BallotLeafVersion is the first byte of the leaf of a vote whose ballot is
// of another kind than single.
const BallotLeafVersion = 4

// encodeBallotLeaf is EncodeLeaf for a ballot (version 4): as version 1,
// with the ballot's canonical form, its length in 2 bytes big-endian
// before it, in the candidate's place.
func encodeBallotLeaf(dst []byte, l Leaf) ([]byte, error) {
	if l.CandidateID != "" || vote.ValidID(l.Ballot) || !vote.ValidCanonical(l.Ballot) {
		return nil, fmt.Errorf("leaf: ballot %q is not a ballot in canonical form with no candidate_id", l.Ballot)
	}
	dst = append(dst, BallotLeafVersion)
	for i, f := range [...]struct{ name, v string }{
		{"poll_id", l.PollID}, {"ballot", l.Ballot},
		{"principal_id", l.PrincipalID}, {"client_event_id", l.ClientEventID},
	} {
		if i == 1 {
			dst = binary.BigEndian.AppendUint16(dst, uint16(len(f.v)))
			dst = append(dst, f.v...)
			continue
		}
		if !vote.ValidID(f.v) {
			return nil, fmt.Errorf("leaf: %s %q is invalid: ids are "+vote.IDRule, f.name, f.v)
		}
		dst = append(dst, byte(len(f.v)))
		dst = append(dst, f.v...)
	}
	if l.ReceivedAt.IsZero() {
		return nil, errors.New("leaf: received_at is not set")
	}
	return binary.BigEndian.AppendUint64(dst, uint64(l.ReceivedAt.UnixMicro())), nil
}
