package stream

import (
	"fmt"

	"tally/vote"
)

// This file reads entries of version 1, one field per part, which intake
// wrote before the single-field encoding (Encode): entries a stream still
// holds at an upgrade are applied after it, and a dead letter of version 1
// replays.

// Field names of an entry of version 1. Its "v" field is "1"; its "fp"
// field is the payload's fingerprint (vote.FingerprintHex), which Decode
// checks.
const (
	FieldVersion     = "v"
	FieldPrincipal   = "principal"
	FieldEventID     = "event_id"
	FieldPoll        = "poll"
	FieldCandidate   = "candidate"
	FieldFingerprint = "fp"
	FieldReceivedAt  = "received_at"

	version1 = "1"
)

// decodeV1 reads an entry of version 1.
func decodeV1(values map[string]any) (Entry, error) {
	var parts [7]string
	for i, field := range [...]string{FieldVersion, FieldPrincipal, FieldEventID, FieldPoll, FieldCandidate, FieldFingerprint, FieldReceivedAt} {
		raw, ok := values[field]
		if !ok {
			if field == FieldVersion {
				return Entry{}, fmt.Errorf("%w: it has neither field %q nor field %q", ErrUndecodable, FieldEntry, FieldVersion)
			}
			return Entry{}, fmt.Errorf("%w: field %q is missing", ErrUndecodable, field)
		}
		s, ok := raw.(string)
		if !ok {
			return Entry{}, fmt.Errorf("%w: field %q is %T, want string", ErrUndecodable, field, raw)
		}
		if field == FieldVersion && s != version1 {
			return Entry{}, fmt.Errorf("%w: version %q, this projector reads versions %s and %s: upgrade it", ErrUndecodable, clip(s), version1, version)
		}
		parts[i] = s
	}
	e, err := checked(parts[1], parts[2], parts[3], parts[4], parts[6])
	if err != nil {
		return Entry{}, err
	}
	if fp := parts[5]; fp != vote.FingerprintHex(e.PollID, e.Answer()) {
		return Entry{}, fmt.Errorf("%w: field %q %q is not the fingerprint of the payload", ErrFingerprintMismatch, FieldFingerprint, clip(fp))
	}
	return e, nil
}
