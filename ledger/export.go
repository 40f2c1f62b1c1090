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
	LeafIndex     int64 // its leaf in its poll's log; -1: in none
}

// Event returns the row as an Event, the form Append takes back.
func (r LedgerRow) Event() Event {
	return Event{PrincipalID: r.PrincipalID, ClientEventID: r.ClientEventID, PollID: r.PollID,
		CandidateID: r.CandidateID, ReceivedAt: r.ReceivedAt}
}

// exportSQL walks the leaves in the order they were written (the id of
// poll_log_leaves), which is each poll's leaf order, and then the rows in
// no leaf (a log still to build, or rows inserted outside an append), in
// seq order.
const exportSQL = `
(SELECT e.seq, e.client_event_id, e.poll_id, e.candidate_id, e.principal_id, e.received_at, e.recorded_at, l.first_leaf + s.ord - 1
FROM poll_log_leaves l
CROSS JOIN LATERAL unnest(l.seqs) WITH ORDINALITY AS s(seq, ord)
JOIN poll_events e ON e.seq = s.seq AND e.poll_id = l.poll_id
WHERE $1::text IS NULL OR l.poll_id = $1
 ORDER BY l.id, s.ord)
UNION ALL
(SELECT e.seq, e.client_event_id, e.poll_id, e.candidate_id, e.principal_id, e.received_at, e.recorded_at, NULL
 FROM poll_events e
 LEFT JOIN (SELECT unnest(seqs) AS seq FROM poll_log_leaves WHERE $1::text IS NULL OR poll_id = $1) l ON l.seq = e.seq
 WHERE ($1::text IS NULL OR e.poll_id = $1) AND l.seq IS NULL
 ORDER BY e.seq)`

// Export calls fn for every ledger row (one poll's when pollID is not
// empty), each poll's in its leaf order, from one snapshot: importing the
// rows in that order elsewhere reproduces every poll's log. Rows in no
// leaf come last, with LeafIndex -1. It streams: memory does not grow
// with the ledger.
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
	var leaf *int64
	_, err = pgx.ForEachRow(rows, []any{&r.Seq, &r.ClientEventID, &r.PollID, &r.CandidateID, &r.PrincipalID, &r.ReceivedAt, &r.RecordedAt, &leaf},
		func() error {
			r.LeafIndex = -1
			if leaf != nil {
				r.LeafIndex = *leaf
			}
			return fn(r)
		})
	return interpretError("export ledger", err)
}
