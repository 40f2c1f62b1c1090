package vote

import "time"

// Event is one vote on its way from intake to the ledger: the
// authenticated principal, the client's idempotency key (scoped to the
// principal), the ballot, and when intake received it. A single choice is
// CandidateID; a ballot of any other kind is Ballot, in its canonical form
// (Ballot.Canonical), with CandidateID empty. The stream carries it
// (stream.Entry) and the ledger appends it (ledger.Event): one type, so
// that nothing copies it field by field on the way.
type Event struct {
	PrincipalID   string // authenticated principal (never from the request body)
	ClientEventID string // the client's idempotency key, scoped to PrincipalID
	PollID        string
	CandidateID   string    // a single choice
	Ballot        string    // a ballot of another kind, canonical; CandidateID is empty then
	ReceivedAt    time.Time // intake's clock when the request arrived
}

// Answer is the event's ballot in canonical form, whatever its kind: the
// candidate id of a single choice. The fingerprint binds it.
func (e Event) Answer() string {
	if e.Ballot != "" {
		return e.Ballot
	}
	return e.CandidateID
}
