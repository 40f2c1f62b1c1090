package ledger

import (
	"fmt"
	"time"

	"tally/vote"
)

// Event is one vote to append: the authenticated principal, the client's
// idempotency key (scoped to the principal), the choice, and when intake
// received it.
type Event struct {
	PrincipalID   string
	ClientEventID string
	PollID        string
	CandidateID   string
	ReceivedAt    time.Time
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
	return fmt.Sprintf("event %d: %s %q is invalid: ids are "+vote.IDRule+" and received_at must be set", e.Index, e.Field, e.Value)
}

func (e *InvalidEventError) Unwrap() error { return ErrInvalid }

func validateEvent(i int, e Event) error {
	for _, f := range []struct{ name, v string }{
		{"principal_id", e.PrincipalID},
		{"event_id", e.ClientEventID},
		{"poll_id", e.PollID},
		{"candidate_id", e.CandidateID},
	} {
		if !vote.ValidID(f.v) {
			return &InvalidEventError{Index: i, Field: f.name, Value: f.v}
		}
	}
	if e.ReceivedAt.IsZero() {
		return &InvalidEventError{Index: i, Field: "received_at", Value: ""}
	}
	return nil
}
