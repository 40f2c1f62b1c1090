// Package stream is the contract between intake and projector: the Redis key
// names, the consumer group, the routing of principals to stream shards, and
// the encoding of one accepted vote as a stream entry.
//
// Every key one request touches (its stream shard, its idempotency record,
// its rate-limit bucket, the shard's epoch) carries the shard's hash tag,
// "{tally:N}" by default, so one Lua script per request can touch them all
// on Redis Cluster.
//
// Streams are never trimmed (no MAXLEN, no MINID): the projector deletes an
// entry (XACK + XDEL) after its effect committed, so a stream's length is its
// backlog. Undecodable or failing entries go to the shard's dead-letter
// stream, whose key ends in ":dead".
//
// The package does no I/O.
package stream

import (
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"strconv"
	"strings"
	"time"

	"tally/vote"
)

// Group is the consumer group every projector joins.
const Group = "tally-projectors"

// DefaultPrefix prefixes every key tally writes in Redis.
const DefaultPrefix = "tally"

// Keys names the Redis keys of one deployment. The zero value is not usable;
// call NewKeys.
type Keys struct {
	prefix string
	shards int
}

// NewKeys returns the key names for prefix (DefaultPrefix when empty) and
// shards stream shards (1 when zero). Intake and projector must agree on both.
func NewKeys(prefix string, shards int) (Keys, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if shards == 0 {
		shards = 1
	}
	if shards < 0 || shards > 1024 {
		return Keys{}, fmt.Errorf("stream shards must be between 1 and 1024, got %d", shards)
	}
	if !keyPrefixRE.MatchString(prefix) {
		return Keys{}, fmt.Errorf("stream prefix %q must be 1-64 characters of [A-Za-z0-9_.-]", prefix)
	}
	return Keys{prefix: prefix, shards: shards}, nil
}

var keyPrefixRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// Shards is the number of stream shards.
func (k Keys) Shards() int { return k.shards }

// Prefix is the key prefix.
func (k Keys) Prefix() string { return k.prefix }

// ShardOf routes a principal to its stream shard. All of one principal's
// events go to one shard, so their order is kept.
func (k Keys) ShardOf(principalID string) int {
	if k.shards <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(principalID))
	return int(h.Sum32() % uint32(k.shards))
}

func (k Keys) tag(shard int) string {
	return "{" + k.prefix + ":" + strconv.Itoa(shard) + "}"
}

// Stream is the key of a shard's stream.
func (k Keys) Stream(shard int) string { return k.tag(shard) + ":events" }

// DeadLetter is the key of a shard's dead-letter stream.
func (k Keys) DeadLetter(shard int) string { return k.tag(shard) + ":events:dead" }

// Streams lists every shard's stream key, in shard order.
func (k Keys) Streams() []string {
	out := make([]string, k.shards)
	for i := range out {
		out[i] = k.Stream(i)
	}
	return out
}

// DeadLetters lists every shard's dead-letter stream key, in shard order.
func (k Keys) DeadLetters() []string {
	out := make([]string, k.shards)
	for i := range out {
		out[i] = k.DeadLetter(i)
	}
	return out
}

// Idempotency is the key of the record of one client event id, scoped to its
// principal, on the principal's shard.
func (k Keys) Idempotency(principalID, clientEventID string) string {
	return k.IdempotencyPrefix(principalID) + clientEventID
}

// IdempotencyPrefix is what the keys of a principal's idempotency records
// start with: Idempotency(p, id) is IdempotencyPrefix(p) + id, so intake
// works it out once per principal rather than once per vote.
func (k Keys) IdempotencyPrefix(principalID string) string {
	return k.tag(k.ShardOf(principalID)) + ":idem:" + principalID + ":"
}

// RateLimit is the key of a principal's rate-limit bucket.
func (k Keys) RateLimit(principalID string) string {
	return k.tag(k.ShardOf(principalID)) + ":rate:" + principalID
}

// Epoch is the key of the time (µs, Redis' clock) since which a shard's
// Redis holds idempotency records: intake sets it once, when it is absent,
// and nothing deletes it. It is lost with the records (a flush, a restart
// without persistence), so after such a loss it says when the loss
// happened, and intake knows which principals may have events whose
// records are gone.
func (k Keys) Epoch(shard int) string { return k.tag(shard) + ":epoch" }

// Entry is one accepted vote as it travels through the stream: the
// ledger's event type (vote.Event), so that what the projector decodes is
// what it appends.
type Entry = vote.Event

// FieldEntry is the one field of an entry: its encoding, written by Encode
// in Go and stored as it is by intake's script, which knows nothing of its
// layout (as asynq stores its task messages).
const FieldEntry = "entry"

// The encoding of an entry is its version, then its principal, client
// event id, poll, received_at (µs since the epoch) and ballot in canonical
// form, separated by single spaces:
//
//	2 alice e-1 lunch 1790000000123456 pizza
//
// No part can hold a space (ids are vote.IDRule, a canonical ballot has
// none), so it splits without escapes, and a person reading the stream or
// a dead letter reads it as it is. The ballot is last, the part most
// likely to grow a new form. The version tells a later format from this
// one; version 1 was the field-per-part layout (decodeV1), still read so
// that entries written before an upgrade are applied after it.
const version = "2"

// Encode is the encoding of e, the value of FieldEntry.
func Encode(e Entry) string {
	return EncodeParts(e.PrincipalID, e.ClientEventID, e.PollID, e.ReceivedAt, e.Answer())
}

// EncodeParts is Encode of the entry of these parts, answer being the
// ballot in canonical form (Entry.Answer), in one allocation when it
// is under 256 bytes (ids of at most 64 bytes and a short ballot).
func EncodeParts(principalID, clientEventID, pollID string, receivedAt time.Time, answer string) string {
	var buf [256]byte
	return string(AppendParts(buf[:0], principalID, clientEventID, pollID, receivedAt, answer))
}

// AppendParts appends EncodeParts of these parts to dst, for a caller
// that reuses its buffer (intake writes the entry into the vote's
// recycled command).
func AppendParts(dst []byte, principalID, clientEventID, pollID string, receivedAt time.Time, answer string) []byte {
	for _, part := range [...]string{version, principalID, clientEventID, pollID} {
		dst = append(dst, part...)
		dst = append(dst, ' ')
	}
	dst = strconv.AppendInt(dst, receivedAt.UnixMicro(), 10)
	dst = append(dst, ' ')
	return append(dst, answer...)
}

// Values is e as XADD field/value pairs.
func Values(e Entry) []any { return []any{FieldEntry, Encode(e)} }

// Record is the value of an idempotency record (Keys.Idempotency): the
// payload its client event id was first accepted with, the poll and the
// ballot in canonical form. Intake's script compares it byte for byte,
// so a retry that spells the same ballot another way is the same payload.
func Record(pollID, answer string) string { return pollID + " " + answer }

// ErrUndecodable is wrapped by every Decode error: the entry can never be
// applied and belongs in the dead-letter stream.
var ErrUndecodable = errors.New("undecodable stream entry")

// ErrFingerprintMismatch is wrapped by the Decode error of an entry of
// version 1 whose fingerprint is not that of its payload. It wraps
// ErrUndecodable.
var ErrFingerprintMismatch = fmt.Errorf("%w: fingerprint mismatch", ErrUndecodable)

// Decode reads an entry from the field/value map go-redis returns, in the
// current encoding (FieldEntry) or in version 1's fields. It checks every
// part (ids, ballot, time): this is where the stream's values become
// trusted, and what it returns the ledger may take as it is. Every error
// wraps ErrUndecodable and names the faulty part.
func Decode(values map[string]any) (Entry, error) {
	raw, ok := values[FieldEntry]
	if !ok {
		return decodeV1(values)
	}
	s, ok := raw.(string)
	if !ok {
		return Entry{}, fmt.Errorf("%w: field %q is %T, want string", ErrUndecodable, FieldEntry, raw)
	}
	return DecodeEntry(s)
}

// DecodeEntry reads the encoding of an entry (Encode). Every error wraps
// ErrUndecodable and names the faulty part.
func DecodeEntry(s string) (Entry, error) {
	v, rest, _ := strings.Cut(s, " ")
	if v != version {
		return Entry{}, fmt.Errorf("%w: version %q, this projector reads versions 1 and %s: upgrade it", ErrUndecodable, clip(v), version)
	}
	var parts [5]string
	for i := range parts {
		var ok bool
		if i == len(parts)-1 {
			parts[i], ok = rest, !strings.Contains(rest, " ")
		} else {
			parts[i], rest, ok = strings.Cut(rest, " ")
		}
		if !ok {
			return Entry{}, fmt.Errorf("%w: %q does not have the %d space-separated parts of version %s", ErrUndecodable, clip(s), len(parts)+1, version)
		}
	}
	if us := parts[3]; us == "" || us[0] < '1' || us[0] > '9' || !allDigits(us) {
		// One encoding per entry: no sign, no leading zero.
		return Entry{}, fmt.Errorf("%w: %s %q is not microseconds since the epoch, in decimal digits", ErrUndecodable, FieldReceivedAt, clip(us))
	}
	return checked(parts[0], parts[1], parts[2], parts[4], parts[3])
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// checked is the entry of its parts once each is valid: the one check of
// every version's values. Errors name the parts by their version 1 field
// names.
func checked(principal, key, poll, answer, receivedAt string) (Entry, error) {
	e := Entry{PrincipalID: principal, ClientEventID: key, PollID: poll}
	for _, f := range [...]struct{ name, v string }{
		{FieldPrincipal, principal}, {FieldEventID, key}, {FieldPoll, poll},
	} {
		if !vote.ValidID(f.v) {
			return Entry{}, fmt.Errorf("%w: %s %q is not "+vote.IDRule, ErrUndecodable, f.name, clip(f.v))
		}
	}
	switch {
	case vote.ValidID(answer):
		e.CandidateID = answer
	case vote.ValidCanonical(answer):
		e.Ballot = answer
	default:
		return Entry{}, fmt.Errorf("%w: %s %q is neither a candidate id ("+vote.IDRule+") nor a ballot in canonical form", ErrUndecodable, FieldCandidate, clip(answer))
	}
	us, err := strconv.ParseInt(receivedAt, 10, 64)
	if err != nil || us <= 0 {
		return Entry{}, fmt.Errorf("%w: %s %q is not microseconds since the epoch", ErrUndecodable, FieldReceivedAt, clip(receivedAt))
	}
	e.ReceivedAt = time.UnixMicro(us).UTC()
	return e, nil
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// Peek reads the principal, client event id and poll of an entry's fields
// (a dead letter's, say) as well as it can, in either version, without
// checking them: "" for a part it cannot find. It is for showing an entry
// to a person, never for applying it (Decode).
func Peek(fields map[string]string) (principalID, clientEventID, pollID string) {
	s, ok := fields[FieldEntry]
	if !ok {
		return fields[FieldPrincipal], fields[FieldEventID], fields[FieldPoll]
	}
	parts := strings.SplitN(s, " ", 5)
	for len(parts) < 4 {
		parts = append(parts, "")
	}
	return parts[1], parts[2], parts[3]
}
