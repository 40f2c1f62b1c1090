// Package vote owns the rules of one vote that every stage applies the same
// way: the syntax of an id (poll, candidate, principal, client event id),
// the payload fingerprint that binds a client event id to one ballot, the
// kinds of ballot a poll may ask for with their parameters and limits, a
// ballot's canonical form and its check against its poll (ballot.go), and
// what one ballot adds to its poll's figures (count.go).
//
// It is a leaf: it imports only the standard library, so ledger, stream,
// intake and projector can all depend on it without depending on each other.
package vote

import (
	"crypto/sha256"
	"encoding/hex"
	"hash/maphash"
)

// MaxIDLen is the longest id.
const MaxIDLen = 64

// IDRule says what ValidID accepts, in the words error messages use.
const IDRule = "1-64 characters of [A-Za-z0-9_-]"

// ValidID reports whether s is a valid poll, candidate, principal or client
// event id: IDRule. It takes bytes too, so a parser can check an id before
// it makes a string of it.
func ValidID[S ~string | ~[]byte](s S) bool {
	if len(s) < 1 || len(s) > MaxIDLen {
		return false
	}
	return IDChars(s)
}

// IDChars reports whether s is made of [A-Za-z0-9_-] only, whatever its
// length.
func IDChars[S ~string | ~[]byte](s S) bool {
	for i := 0; i < len(s); i++ {
		if !idChar(s[i]) {
			return false
		}
	}
	return true
}

// idChar reports whether c is one of [A-Za-z0-9_-].
func idChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// Fingerprint is the SHA-256 of a vote's payload, the part a client event id
// must always carry the same: the poll and the ballot's canonical form
// (Ballot.Canonical; for a single choice, the candidate id), so a retry
// that spells the same ballot in another key order is the same payload.
func Fingerprint(pollID, ballot string) [32]byte {
	var buf [160]byte // the payload of most ballots, on the stack
	return sha256.Sum256(append(append(append(buf[:0], pollID...), 0), ballot...))
}

// FingerprintHex is Fingerprint in lowercase hex, as the stream carries it.
func FingerprintHex(pollID, ballot string) string {
	fp := Fingerprint(pollID, ballot)
	return hex.EncodeToString(fp[:])
}

// Lanes splits work among n workers by principal so that it may run in
// parallel without changing any outcome: every rule that makes an outcome
// depend on order (a key's first payload, a principal's first answer in a
// poll) is about one principal, so a worker that sees all of a principal's
// votes, in order, decides them as one worker would decide everything. The
// split is stable within one Lanes value, not across processes.
type Lanes struct {
	seed maphash.Seed
	n    uint64
}

// NewLanes returns a split among n workers (at least 1).
func NewLanes(n int) Lanes {
	return Lanes{seed: maphash.MakeSeed(), n: uint64(max(n, 1))}
}

// Of is the worker, 0 to n-1, that owns principalID.
func (l Lanes) Of(principalID string) int {
	if l.n == 1 {
		return 0
	}
	return int(maphash.String(l.seed, principalID) % l.n)
}
