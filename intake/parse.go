package intake

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"tally/vote"
)

// maxBodyBytes bounds the body of POST /v1/votes.
const maxBodyBytes = 4 << 10

// vote is the body of POST /v1/votes.
type voteBody struct {
	EventID     string // the client's idempotency key
	PollID      string
	CandidateID string
}

// Keys of a vote body, in the order details name them.
const (
	keyEventID     = "event_id"
	keyPollID      = "poll_id"
	keyCandidateID = "candidate_id"
)

// parseError is a body parseVote refused; its message is the detail of the
// 400 answer.
type parseError struct{ detail string }

func (e *parseError) Error() string { return e.detail }

func refuse(format string, args ...any) error {
	return &parseError{detail: fmt.Sprintf(format, args...)}
}

// parseVote reads a vote body strictly: one JSON object with exactly the keys
// event_id, poll_id and candidate_id, each once, each a string of 1-64
// characters of [A-Za-z0-9_-], and nothing but whitespace after it. Every
// error is a *parseError that says what was wrong.
func parseVote(body []byte) (voteBody, error) {
	if v, ok := parseVoteFast(body); ok {
		return v, nil
	}
	return parseVoteTokens(body)
}

// parseVoteTokens is parseVote on encoding/json's token stream: it handles
// every JSON form and names what is wrong.
func parseVoteTokens(body []byte) (voteBody, error) {
	if len(body) > maxBodyBytes {
		return voteBody{}, refuse("the body is %d bytes, the limit is %d", len(body), maxBodyBytes)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return voteBody{}, refuse(`the body is empty: send {"event_id": "...", "poll_id": "...", "candidate_id": "..."}`)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	syntax := func(err error) error {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return refuse("the body is not valid JSON: it ends before the object is closed")
		}
		return refuse("the body is not valid JSON at byte %d: %v", dec.InputOffset(), err)
	}

	tok, err := dec.Token()
	if err != nil {
		return voteBody{}, syntax(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return voteBody{}, refuse("the body must be a JSON object, got %s", kindOf(tok))
	}
	var v voteBody
	seen := make(map[string]bool, 3)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return voteBody{}, syntax(err)
		}
		key, ok := tok.(string)
		if !ok { // the decoder only yields strings here; be safe anyway
			return voteBody{}, refuse("the body is not valid JSON at byte %d: object keys must be strings", dec.InputOffset())
		}
		var dst *string
		switch key {
		case keyEventID:
			dst = &v.EventID
		case keyPollID:
			dst = &v.PollID
		case keyCandidateID:
			dst = &v.CandidateID
		default:
			return voteBody{}, refuse(`key %s is not allowed: the body takes exactly "event_id", "poll_id" and "candidate_id"`, quoteKey(key))
		}
		if seen[key] {
			return voteBody{}, refuse("key %q appears more than once: give each key once", key)
		}
		seen[key] = true
		tok, err = dec.Token()
		if err != nil {
			return voteBody{}, syntax(err)
		}
		s, ok := tok.(string)
		if !ok {
			return voteBody{}, refuse("%q must be a string, got %s", key, kindOf(tok))
		}
		if !vote.ValidID(s) {
			return voteBody{}, refuse("%q must be "+vote.IDRule+", got %s", key, describeID(s))
		}
		*dst = s
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return voteBody{}, syntax(err)
	}
	for _, k := range []string{keyEventID, keyPollID, keyCandidateID} {
		if !seen[k] {
			return voteBody{}, refuse(`key %q is missing: the body takes exactly "event_id", "poll_id" and "candidate_id"`, k)
		}
	}
	if tok, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			return voteBody{}, refuse("unexpected data after the JSON object at byte %d: send one object and nothing else", dec.InputOffset())
		}
		return voteBody{}, refuse("unexpected %s after the JSON object: send one object and nothing else", kindOf(tok))
	}
	return v, nil
}

// kindOf names the JSON kind of a token for a detail.
func kindOf(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			return "an object"
		case '[':
			return "an array"
		}
		return "a stray " + strconv.QuoteRune(rune(t))
	case string:
		return "a string"
	case json.Number, float64:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", tok)
}

// quoteKey quotes a client's key for a detail, shortened so a detail stays
// small whatever the client sent.
func quoteKey(k string) string {
	if len(k) > 40 {
		return strconv.Quote(k[:40]) + "..."
	}
	return strconv.Quote(k)
}

// describeID says what is wrong with an invalid id, without echoing a long
// one back.
func describeID(s string) string {
	switch {
	case s == "":
		return "an empty string"
	case len(s) > 64:
		return fmt.Sprintf("%d bytes", len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Sprintf("%q with a forbidden character at position %d", s, i+1)
		}
	}
	return strconv.Quote(s)
}

// rawVote is a vote parsed by parseVoteRaw: its ids as the body's bytes.
type rawVote struct {
	eventID, pollID, candidateID []byte
}

// parseVoteFast is parseVoteRaw with the ids made strings.
func parseVoteFast(b []byte) (voteBody, bool) {
	rv, ok := parseVoteRaw(b)
	if !ok {
		return voteBody{}, false
	}
	return voteBody{EventID: string(rv.eventID), PollID: string(rv.pollID), CandidateID: string(rv.candidateID)}, true
}

// parseVoteRaw accepts the plain form clients send, without allocating:
// one object of the three keys, each once, with string values of id
// characters, no escapes, JSON whitespace anywhere between tokens. It
// returns false for anything else, valid or not, and parseVoteTokens
// decides then. The ids it returns are slices of b.
func parseVoteRaw(b []byte) (rawVote, bool) {
	if len(b) > maxBodyBytes {
		return rawVote{}, false
	}
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return rawVote{}, false
	}
	i++
	var v rawVote
	var seen [3]bool
	for n := range 3 {
		if n > 0 {
			if i = skipSpace(b, i); i >= len(b) || b[i] != ',' {
				return rawVote{}, false
			}
			i++
		}
		ks, ke, ok := plainString(b, skipSpace(b, i))
		if !ok {
			return rawVote{}, false
		}
		var k int
		switch string(b[ks:ke]) {
		case keyEventID:
			k = 0
		case keyPollID:
			k = 1
		case keyCandidateID:
			k = 2
		default:
			return rawVote{}, false
		}
		if seen[k] {
			return rawVote{}, false
		}
		seen[k] = true
		if i = skipSpace(b, ke+1); i >= len(b) || b[i] != ':' {
			return rawVote{}, false
		}
		vs, ve, ok := plainString(b, skipSpace(b, i+1))
		if !ok || !vote.ValidID(b[vs:ve]) {
			return rawVote{}, false
		}
		val := b[vs:ve:ve]
		switch k {
		case 0:
			v.eventID = val
		case 1:
			v.pollID = val
		case 2:
			v.candidateID = val
		}
		i = ve + 1
	}
	if i = skipSpace(b, i); i >= len(b) || b[i] != '}' {
		return rawVote{}, false
	}
	if skipSpace(b, i+1) != len(b) {
		return rawVote{}, false
	}
	return v, true
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// plainString finds a JSON string at b[i] that holds no escape and no
// control or non-ASCII byte, and returns the bounds of its content; its
// closing quote is at end.
func plainString(b []byte, i int) (start, end int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return 0, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return i + 1, j, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return 0, 0, false
		}
	}
	return 0, 0, false
}
