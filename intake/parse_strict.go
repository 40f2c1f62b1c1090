package intake

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"

	"tally/vote"
)

// This file owns the strict parser of a vote body: parseVote's answer for
// every body the fast path (parsePlain) does not take, and the details
// that say what is wrong with a refused one.

// parseStrict is parseVote on encoding/json's token stream: it takes every
// JSON form (escapes, any order) and names what is wrong.
func parseStrict(body []byte) (voteBody, error) {
	if len(body) > maxBodyBytes {
		return voteBody{}, refuse("the body is %d bytes, but a vote takes at most %d", len(body), maxBodyBytes)
	}
	if bytes.HasPrefix(body[skipSpace(body, 0):], byteOrderMark) {
		return voteBody{}, refuse("the body starts with a byte order mark (BOM): send UTF-8 JSON without it")
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return voteBody{}, refuse("the body is empty: send " + voteShape)
	}
	p := strictParser{dec: json.NewDecoder(bytes.NewReader(body)), vals: make(map[string]string, 3)}
	p.dec.UseNumber()
	tok, err := p.dec.Token()
	if err != nil {
		return voteBody{}, p.syntax(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return voteBody{}, refuse("the body must be a JSON object, not %s: send "+voteShape, kindOf(tok))
	}
	for p.dec.More() {
		if err := p.member(); err != nil {
			return voteBody{}, err
		}
	}
	if _, err := p.dec.Token(); err != nil { // the closing brace
		return voteBody{}, p.syntax(err)
	}
	for _, k := range []string{keyEventID, keyPollID} {
		if _, ok := p.vals[k]; !ok {
			return voteBody{}, refuse(`the key %q is missing: the body takes exactly `+voteKeys, k)
		}
	}
	_, hasCandidate := p.vals[keyCandidateID]
	switch {
	case hasCandidate && p.ballot != nil:
		return voteBody{}, refuse(`the body has both "candidate_id" and "ballot": send one of them (a single choice may be either; a poll of another kind takes "ballot")`)
	case !hasCandidate && p.ballot == nil:
		return voteBody{}, refuse(`the key "candidate_id" (or "ballot") is missing: the body takes exactly ` + voteKeys)
	}
	if tok, err := p.dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			return voteBody{}, refuse("the body goes on after the JSON object, at byte %d: send one object and nothing else", p.dec.InputOffset()+1)
		}
		return voteBody{}, refuse("the body has %s after the JSON object: send one object and nothing else", kindOf(tok))
	}
	v := voteBody{pollID: []byte(p.vals[keyPollID]), ballot: p.ballot}
	v.eventID, v.statusURL = newEventID([]byte(p.vals[keyEventID]))
	if hasCandidate {
		v.candidateID = []byte(p.vals[keyCandidateID])
		v.answer = v.candidateID
	}
	return v, nil
}

// strictParser is the state of parseStrict: the token stream and the
// values read so far, by key; the ballot's raw JSON value once read.
type strictParser struct {
	dec    *json.Decoder
	vals   map[string]string
	ballot []byte
}

// member reads one member of the object: a known key, not seen before,
// and a string value that is a valid id, or for ballot any JSON value
// (its shape depends on its poll's kind: admit reads it).
func (p *strictParser) member() error {
	tok, err := p.dec.Token()
	if err != nil {
		return p.syntax(err)
	}
	key, ok := tok.(string)
	if !ok { // the decoder only yields strings here; be safe anyway
		return refuse("the body is not valid JSON at byte %d: object keys must be strings", p.dec.InputOffset()+1)
	}
	switch key {
	case keyEventID, keyPollID, keyCandidateID, keyBallot:
	default:
		return refuse(`the key %s is not allowed: the body takes exactly `+voteKeys, quoteClip(key))
	}
	if _, seen := p.vals[key]; seen || key == keyBallot && p.ballot != nil {
		return refuse("the key %q appears more than once: give each key once", key)
	}
	if key == keyBallot {
		var raw json.RawMessage
		if err := p.dec.Decode(&raw); err != nil {
			return p.syntax(err)
		}
		p.ballot = raw
		return nil
	}
	tok, err = p.dec.Token()
	if err != nil {
		return p.syntax(err)
	}
	s, ok := tok.(string)
	if !ok {
		return refuse("the value of %q must be a string, not %s", key, kindOf(tok))
	}
	if !vote.ValidID(s) {
		return refuse("the value of %q must be "+vote.IDRule+", not %s", key, describeID(s))
	}
	p.vals[key] = s
	return nil
}

// syntax is the refusal of a body the decoder found invalid.
func (p *strictParser) syntax(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return refuse("the body is not valid JSON: it ends before the object is closed; send the whole object")
	}
	// InputOffset is where the token that failed starts, counted from 0.
	return refuse("the body is not valid JSON at byte %d (%v): send one JSON object", p.dec.InputOffset()+1, err)
}

// voteShape is the form of a vote body, for details; voteKeys its keys.
const (
	voteShape = `{"event_id": "...", "poll_id": "...", "candidate_id": "..."}, or "ballot": ... instead of "candidate_id"`
	voteKeys  = `"event_id", "poll_id" and one of "candidate_id" or "ballot"`
)

// byteOrderMark is the UTF-8 encoding of U+FEFF, which some editors and
// Windows tools put before a text; JSON forbids it (RFC 8259 8.1).
var byteOrderMark = []byte("\xef\xbb\xbf")
