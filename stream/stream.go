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
	return k.tag(k.ShardOf(principalID)) + ":idem:" + principalID + ":" + clientEventID
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

// Entry is one accepted vote as it travels through the stream. Its ballot
// is CandidateID for a single choice, else Ballot (canonical, see
// vote.Ballot.Canonical); both travel in the candidate field, which holds
// the ballot's canonical form whatever its kind: an id is a single
// choice, anything else a ballot of another kind.
type Entry struct {
	PrincipalID   string    // authenticated principal (never from the request body)
	ClientEventID string    // the client's idempotency key, scoped to PrincipalID
	PollID        string    //
	CandidateID   string    // a single choice
	Ballot        string    // a ballot of another kind, canonical; CandidateID is empty then
	Fingerprint   string    // vote.FingerprintHex of the poll and the ballot's canonical form
	ReceivedAt    time.Time // intake's clock when the request arrived
}

// Answer is the entry's ballot in canonical form: what the candidate
// field carries.
func (e Entry) Answer() string {
	if e.Ballot != "" {
		return e.Ballot
	}
	return e.CandidateID
}

// Field names of an encoded entry. The version field lets a later format be
// told apart from this one.
const (
	FieldVersion     = "v"
	FieldPrincipal   = "principal"
	FieldEventID     = "event_id"
	FieldPoll        = "poll"
	FieldCandidate   = "candidate"
	FieldFingerprint = "fp"
	FieldReceivedAt  = "received_at"

	version = "1"
)

// Values encodes e as XADD field/value pairs, in a fixed order.
func (e Entry) Values() []string {
	return []string{
		FieldVersion, version,
		FieldPrincipal, e.PrincipalID,
		FieldEventID, e.ClientEventID,
		FieldPoll, e.PollID,
		FieldCandidate, e.Answer(),
		FieldFingerprint, e.Fingerprint,
		FieldReceivedAt, strconv.FormatInt(e.ReceivedAt.UnixMicro(), 10),
	}
}

// ErrUndecodable is wrapped by every Decode error: the entry can never be
// applied and belongs in the dead-letter stream.
var ErrUndecodable = errors.New("undecodable stream entry")

// isLowerHex64 reports whether s is 64 lowercase hex digits.
func isLowerHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Decode reads an entry from the field/value map go-redis returns. Every
// error wraps ErrUndecodable and names the faulty field.
func Decode(values map[string]any) (Entry, error) {
	get := func(field string) (string, error) {
		raw, ok := values[field]
		if !ok {
			return "", fmt.Errorf("%w: field %q is missing", ErrUndecodable, field)
		}
		s, ok := raw.(string)
		if !ok {
			return "", fmt.Errorf("%w: field %q is %T, want string", ErrUndecodable, field, raw)
		}
		return s, nil
	}
	v, err := get(FieldVersion)
	if err != nil {
		return Entry{}, err
	}
	if v != version {
		return Entry{}, fmt.Errorf("%w: version %q, this projector reads version %s", ErrUndecodable, v, version)
	}
	var e Entry
	for _, f := range []struct {
		name string
		dst  *string
	}{
		{FieldPrincipal, &e.PrincipalID},
		{FieldEventID, &e.ClientEventID},
		{FieldPoll, &e.PollID},
	} {
		s, err := get(f.name)
		if err != nil {
			return Entry{}, err
		}
		if !vote.ValidID(s) {
			return Entry{}, fmt.Errorf("%w: field %q is %q, want "+vote.IDRule, ErrUndecodable, f.name, s)
		}
		*f.dst = s
	}
	answer, err := get(FieldCandidate)
	if err != nil {
		return Entry{}, err
	}
	switch {
	case vote.ValidID(answer):
		e.CandidateID = answer
	case vote.ValidCanonical(answer):
		e.Ballot = answer
	default:
		return Entry{}, fmt.Errorf("%w: field %q is %q, want a candidate id ("+vote.IDRule+") or a ballot in canonical form", ErrUndecodable, FieldCandidate, answer)
	}
	fp, err := get(FieldFingerprint)
	if err != nil {
		return Entry{}, err
	}
	if !isLowerHex64(fp) {
		return Entry{}, fmt.Errorf("%w: field %q is not 64 lowercase hex digits", ErrUndecodable, FieldFingerprint)
	}
	e.Fingerprint = fp
	rat, err := get(FieldReceivedAt)
	if err != nil {
		return Entry{}, err
	}
	us, err := strconv.ParseInt(rat, 10, 64)
	if err != nil || us <= 0 {
		return Entry{}, fmt.Errorf("%w: field %q is %q, want microseconds since the epoch", ErrUndecodable, FieldReceivedAt, rat)
	}
	e.ReceivedAt = time.UnixMicro(us).UTC()
	return e, nil
}
