package ledger

import (
	"fmt"
	"time"

	"tally/vote"
)

// Event is one vote to append (vote.Event): the authenticated principal,
// the client's idempotency key (scoped to the principal), the ballot, and
// when intake received it. A single choice is CandidateID; a ballot of any
// other kind is Ballot, in its canonical form (vote.Ballot.Canonical),
// with CandidateID empty. It is the stream's entry type too
// (stream.Entry), so the projector hands on what it decoded as it is.
type Event = vote.Event

// EventOf is the event of a ballot in canonical form (Answer's inverse).
func EventOf(principal, key, poll, answer string, received time.Time) Event {
	e := Event{PrincipalID: principal, ClientEventID: key, PollID: poll, ReceivedAt: received}
	if isChoice(answer) {
		e.CandidateID = answer
	} else {
		e.Ballot = answer
	}
	return e
}

// isChoice reports whether an answer, as the ledger's rows give it
// (coalesce(ballot, candidate_id)), is one choice, a single choice's
// candidate, rather than a ballot of another kind in canonical form.
func isChoice(answer string) bool { return vote.ValidID(answer) }

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Status is where an event stands.
type Status string

// The statuses of DESIGN.md's outcomes table. Append returns the last three;
// pending is for events still on their way to the ledger.
const (
	StatusPending   Status = "pending"
	StatusRecorded  Status = "recorded"
	StatusDuplicate Status = "duplicate"
	StatusRejected  Status = "rejected"
	// StatusSuperseded is a ballot of a poll of answers latest that a later
	// ballot of its principal replaced: it is in the ledger and its poll's
	// log, and no longer counts. Append never returns it; reads do.
	StatusSuperseded Status = "superseded"
)

// Reason says why an event was rejected.
type Reason string

// Reasons for a rejection. unknown_poll and not_eligible catch events that
// intake refuses up front (404 both) but that can still reach the ledger
// through import or a catalog change while the event waited in the stream.
const (
	ReasonAlreadyResponded Reason = "already_responded"
	ReasonKeyReused        Reason = "key_reused"
	ReasonPollClosed       Reason = "poll_closed"
	ReasonInvalidChoice    Reason = "invalid_choice"
	ReasonInvalidBallot    Reason = "invalid_ballot" // a ballot its poll's rules refuse, or of another kind
	ReasonUnknownPoll      Reason = "unknown_poll"
	ReasonNotEligible      Reason = "not_eligible"
)

// Outcome is what Append did with one event.
type Outcome struct {
	Status Status
	Reason Reason // set when Status is rejected
	Seq    int64  // the ledger row's sequence when Status is recorded or duplicate
}

func (o Outcome) String() string {
	if o.Status == StatusRejected {
		return string(o.Status) + ": " + string(o.Reason)
	}
	return string(o.Status)
}

// InvalidEventError reports an event Append refused to look at: a malformed
// id or a missing receive time. Nothing of its batch was applied.
type InvalidEventError struct {
	Index int // position in the batch
	Field string
	Value string
}

func (e *InvalidEventError) Error() string {
	return fmt.Sprintf("event %d: %s %q is invalid: ids are "+vote.IDRule+", a ballot is in canonical form (with no candidate_id) and received_at must be set", e.Index, e.Field, e.Value)
}

func (e *InvalidEventError) Unwrap() error { return ErrInvalid }

func validateEvent(i int, e Event) error {
	for _, f := range []struct{ name, v string }{
		{"principal_id", e.PrincipalID},
		{"event_id", e.ClientEventID},
		{"poll_id", e.PollID},
	} {
		if !vote.ValidID(f.v) {
			return &InvalidEventError{Index: i, Field: f.name, Value: f.v}
		}
	}
	switch {
	case e.Ballot == "" && !vote.ValidID(e.CandidateID):
		return &InvalidEventError{Index: i, Field: "candidate_id", Value: e.CandidateID}
	case e.Ballot != "" && (e.CandidateID != "" || vote.ValidID(e.Ballot) || !vote.ValidCanonical(e.Ballot)):
		return &InvalidEventError{Index: i, Field: "ballot", Value: e.Ballot}
	}
	if e.ReceivedAt.IsZero() {
		return &InvalidEventError{Index: i, Field: "received_at", Value: ""}
	}
	return nil
}
