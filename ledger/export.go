package ledger

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// LedgerRow is one row of poll_events as Export reads it.
type LedgerRow struct {
	Seq           int64
	ClientEventID string
	PollID        string
	CandidateID   string
	PrincipalID   string
	ReceivedAt    time.Time
	RecordedAt    time.Time
}

// Event returns the row as an Event, the form Append takes back.
func (r LedgerRow) Event() Event {
	return Event{PrincipalID: r.PrincipalID, ClientEventID: r.ClientEventID, PollID: r.PollID,
		CandidateID: r.CandidateID, ReceivedAt: r.ReceivedAt}
}

const exportSQL = `
SELECT seq, client_event_id, poll_id, candidate_id, principal_id, received_at, recorded_at
FROM poll_events WHERE $1::text IS NULL OR poll_id = $1 ORDER BY seq`

// Export calls fn for every ledger row (one poll's when pollID is not
// empty) in ledger order, from one snapshot. It streams: memory does not
// grow with the ledger.
func (s *Store) Export(ctx context.Context, pollID string, fn func(LedgerRow) error) error {
	var p *string
	if pollID != "" {
		p = &pollID
	}
	rows, err := s.pool.Query(ctx, exportSQL, p)
	if err != nil {
		return interpretError("export ledger", err)
	}
	var r LedgerRow
	_, err = pgx.ForEachRow(rows, []any{&r.Seq, &r.ClientEventID, &r.PollID, &r.CandidateID, &r.PrincipalID, &r.ReceivedAt, &r.RecordedAt},
		func() error { return fn(r) })
	return interpretError("export ledger", err)
}
