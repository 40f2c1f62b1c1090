package intake

import (
	"fmt"

	"tally/vote"
)

// This file owns the body of POST /v1/votes: its rules, parseVote, which
// the handler calls, and the fast path for the plain form clients send.
// The strict parser, which takes every JSON form and names what is wrong,
// is in parse_strict.go.

// maxBodyBytes bounds the body of POST /v1/votes.
const maxBodyBytes = 4 << 10

// voteBody is a parsed body of POST /v1/votes. The poll and candidate ids
// and the ballot are only looked up in the catalog, parsed and quoted in
// refusals, all before the handler returns, so they may be slices of the
// body's buffer; the event id is a string of its own, since a pipeline may
// still hold it after the handler returned and the buffer went back (see
// bodyBufs). Exactly one of candidateID and ballot is set.
type voteBody struct {
	eventID string // the client's idempotency key
	// statusURL is the event's status URL, /v1/votes/{event_id}, the 202's
	// Location; eventID is its tail, so both are one allocation
	// (newEventID).
	statusURL           string
	pollID, candidateID []byte
	// ballot is the raw JSON value of "ballot", read against its poll's
	// kind once the poll is known (admit).
	ballot []byte
	// answer is the vote's ballot in canonical form (vote.Ballot.Canonical),
	// what its idempotency record and fingerprint bind: the candidate id of
	// candidate_id; admit sets it for a ballot. A ballot admit could not
	// read keeps its raw bytes here, which no record holds.
	answer []byte
}

// Keys of a vote body, in the order details name them.
const (
	keyEventID     = "event_id"
	keyPollID      = "poll_id"
	keyCandidateID = "candidate_id"
	keyBallot      = "ballot"
)

// parseError is a body parseVote refused; its message is the detail of the
// 400 answer.
type parseError struct{ detail string }

func (e *parseError) Error() string { return e.detail }

func refuse(format string, args ...any) error {
	return &parseError{detail: fmt.Sprintf(format, args...)}
}

// parseVote reads a vote body strictly: one JSON object with exactly the
// keys event_id, poll_id and one of candidate_id or ballot, each once,
// each a string of vote.IDRule but ballot (any JSON value, read once its
// poll is known), and nothing but whitespace after it. Every error is a
// *parseError that says what was wrong. The plain form is read in place
// (parsePlain); anything else goes to parseStrict, which decides.
func parseVote(body []byte) (voteBody, error) {
	if v, ok := parsePlain(body); ok {
		return v, nil
	}
	return parseStrict(body)
}

// parsePlain accepts the plain form clients send for a single choice: one
// object of the three keys event_id, poll_id and candidate_id, each once, with string values of id characters, no escapes, JSON
// whitespace anywhere between tokens. It returns false for anything else,
// valid or not, and parseStrict decides then. It walks the bytes without
// encoding/json, and allocates only the event id's string: the poll and
// candidate ids it returns are slices of b.
func parsePlain(b []byte) (voteBody, bool) {
	if len(b) > maxBodyBytes {
		return voteBody{}, false
	}
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return voteBody{}, false
	}
	i++
	var vals [3][]byte // by key: event, poll, candidate
	for n := range 3 {
		if n > 0 {
			if i = skipSpace(b, i); i >= len(b) || b[i] != ',' {
				return voteBody{}, false
			}
			i++
		}
		k, val, end, ok := plainMember(b, skipSpace(b, i))
		if !ok || vals[k] != nil {
			return voteBody{}, false
		}
		vals[k] = val
		i = end
	}
	if i = skipSpace(b, i); i >= len(b) || b[i] != '}' {
		return voteBody{}, false
	}
	if skipSpace(b, i+1) != len(b) {
		return voteBody{}, false
	}
	v := voteBody{pollID: vals[1], candidateID: vals[2], answer: vals[2]}
	v.eventID, v.statusURL = newEventID(vals[0])
	return v, true
}

// newEventID returns the event id id as a string, and its status URL,
// made in one allocation: the id is the URL's tail.
func newEventID(id []byte) (eventID, statusURL string) {
	statusURL = routeVotes + "/" + string(id)
	return statusURL[len(routeVotes)+1:], statusURL
}

// plainMember reads the member at b[i] of a plain vote body: a known key,
// a colon and a plain string of a valid id. It returns the key's index
// (0 event, 1 poll, 2 candidate), the value as a slice of b, and the index
// after its closing quote.
func plainMember(b []byte, i int) (key int, val []byte, end int, ok bool) {
	ks, ke, ok := plainString(b, i)
	if !ok {
		return 0, nil, 0, false
	}
	switch string(b[ks:ke]) { // no string is made for a switch
	case keyEventID:
		key = 0
	case keyPollID:
		key = 1
	case keyCandidateID:
		key = 2
	default:
		return 0, nil, 0, false
	}
	if i = skipSpace(b, ke+1); i >= len(b) || b[i] != ':' {
		return 0, nil, 0, false
	}
	vs, ve, ok := plainString(b, skipSpace(b, i+1))
	if !ok || !vote.ValidID(b[vs:ve]) {
		return 0, nil, 0, false
	}
	return key, b[vs:ve:ve], ve + 1, true
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
