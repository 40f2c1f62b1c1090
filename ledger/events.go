package ledger

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// EventKey names one client event id of one principal: the key the ledger
// holds at most one event for.
type EventKey struct {
	PrincipalID   string
	ClientEventID string
}

// eventsSQL is eventSQL for many keys at once: one index lookup per key
// and table, the ledger row preferred over a rejection record.
const eventsSQL = `
SELECT k.principal_id, k.client_event_id, e.poll_id, e.candidate_id, coalesce(e.ballot, ''), e.status, e.superseded_by, e.reason, e.seq, e.received_at, e.recorded_at
FROM unnest($1::text[], $2::text[]) AS k(principal_id, client_event_id)
CROSS JOIN LATERAL (
    SELECT 1 AS pri, poll_id, candidate_id, ballot, s.status, s.superseded_by, '' AS reason, seq, received_at, recorded_at
    FROM poll_events e CROSS JOIN LATERAL (` + supersededSQL + `) s
    WHERE principal_id = k.principal_id AND client_event_id = k.client_event_id
    UNION ALL
    SELECT 2, poll_id, candidate_id, ballot, 'rejected', '', reason, 0, received_at, recorded_at
    FROM poll_event_rejections WHERE principal_id = k.principal_id AND client_event_id = k.client_event_id
    ORDER BY pri LIMIT 1
) e`

// Events is Event for many keys in one query: it returns the ledger's
// record of each key it knows, by key; a key it does not know is absent
// from the map. It costs one round trip whatever the number of keys, so a
// caller with many lookups to make at once (intake's check of new event
// ids) makes them together. It does not look up leaf indexes: LeafIndex is
// -1 in what it returns (Event has it).
func (s *Store) Events(ctx context.Context, keys []EventKey) (map[EventKey]EventRecord, error) {
	principals := make([]string, len(keys))
	ids := make([]string, len(keys))
	for i, k := range keys {
		principals[i], ids[i] = k.PrincipalID, k.ClientEventID
	}
	rows, err := s.pool.Query(ctx, eventsSQL, principals, ids)
	if err != nil {
		return nil, interpretError("read events", err)
	}
	found := make(map[EventKey]EventRecord, len(keys))
	var r EventRecord
	_, err = pgx.ForEachRow(rows, []any{&r.PrincipalID, &r.ClientEventID, &r.PollID, &r.CandidateID, &r.Ballot,
		&r.Status, &r.SupersededBy, &r.Reason, &r.Seq, &r.ReceivedAt, &r.RecordedAt}, func() error {
		r.LeafIndex = -1
		found[EventKey{r.PrincipalID, r.ClientEventID}] = r
		return nil
	})
	if err != nil {
		return nil, interpretError("read events", err)
	}
	return found, nil
}
