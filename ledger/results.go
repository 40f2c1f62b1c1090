package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"tally/audit"
)

// CandidateVotes is one candidate's tally.
type CandidateVotes struct {
	CandidateID string `json:"candidate_id"`
	Votes       int64  `json:"votes"`
}

// Results are a poll's tallies from the projection.
type Results struct {
	PollID  string           `json:"poll_id"`
	Results []CandidateVotes `json:"results"`
	Total   int64            `json:"total"`
	// TreeSize is the size of the poll's log these tallies are the count
	// of: its first TreeSize leaves, which a signed checkpoint of that
	// size covers.
	TreeSize int64     `json:"tree_size"`
	AsOf     time.Time `json:"as_of"` // the database's clock when read
}

// resultsSQL reads the tallies and the log's size in one statement, so from
// one snapshot: the projection and the head are written in one transaction,
// and so the size is the very number of leaves the tallies count.
const resultsSQL = `
SELECT c.candidate_id, coalesce(r.vote_count, 0), now(), coalesce(h.size, 0)
FROM poll_choices c
LEFT JOIN poll_results r ON r.poll_id = c.poll_id AND r.candidate_id = c.candidate_id
LEFT JOIN poll_log_heads h ON h.poll_id = c.poll_id
WHERE c.poll_id = $1
ORDER BY c.position`

// Results reads a poll's tallies from the projection, in choice order.
func (s *Store) Results(ctx context.Context, pollID string) (Results, error) {
	rows, err := s.pool.Query(ctx, resultsSQL, pollID)
	if err != nil {
		return Results{}, interpretError("read results", err)
	}
	res := Results{PollID: pollID, Results: []CandidateVotes{}}
	var cv CandidateVotes
	_, err = pgx.ForEachRow(rows, []any{&cv.CandidateID, &cv.Votes, &res.AsOf, &res.TreeSize}, func() error {
		res.Results = append(res.Results, cv)
		res.Total += cv.Votes
		return nil
	})
	if err != nil {
		return Results{}, interpretError("read results", err)
	}
	if len(res.Results) == 0 {
		return Results{}, fmt.Errorf("read results of poll %s: %w", pollID, ErrNotFound)
	}
	return res, nil
}

// PollTotals reads the total of every poll's tallies, from the projection.
func (s *Store) PollTotals(ctx context.Context) (map[string]int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT poll_id, sum(vote_count)::bigint FROM poll_results GROUP BY poll_id`)
	if err != nil {
		return nil, interpretError("read poll totals", err)
	}
	totals := map[string]int64{}
	var id string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&id, &n}, func() error {
		totals[id] = n
		return nil
	})
	return totals, interpretError("read poll totals", err)
}

// EventRecord is what the ledger knows of one client event id.
type EventRecord struct {
	PrincipalID   string
	ClientEventID string
	PollID        string
	CandidateID   string
	Status        Status // recorded or rejected
	Reason        Reason // for rejected
	Seq           int64  // for recorded
	LeafIndex     int64  // for recorded: its leaf in its poll's log (-1: none known)
	ReceivedAt    time.Time
	RecordedAt    time.Time
}

// eventSQL prefers the ledger row: a key_reused rejection can sit beside
// the ledger row of the same key. A row's leaf is found in the
// poll_log_leaves row that holds its seq (-1 for a row in no leaf, which
// rebuild reports).
const eventSQL = `
SELECT poll_id, candidate_id, status, reason, seq, leaf_index, received_at, recorded_at FROM (
    SELECT 1 AS pri, poll_id, candidate_id, 'recorded' AS status, '' AS reason, seq, coalesce((
        SELECT l.first_leaf + array_position(l.seqs, e.seq) - 1 FROM poll_log_leaves l
        WHERE l.poll_id = e.poll_id AND l.max_seq >= e.seq AND l.min_seq <= e.seq AND e.seq = ANY (l.seqs)
        ORDER BY l.max_seq LIMIT 1), -1) AS leaf_index, received_at, recorded_at
    FROM poll_events e WHERE principal_id = $1 AND client_event_id = $2
    UNION ALL
    SELECT 2, poll_id, candidate_id, 'rejected', reason, 0, -1, received_at, recorded_at
    FROM poll_event_rejections WHERE principal_id = $1 AND client_event_id = $2
) e ORDER BY pri LIMIT 1`

// Event returns the ledger's record of a principal's client event id: the
// ledger row if there is one, otherwise its rejection record, otherwise
// ErrNotFound. The client key is scoped to the principal: another
// principal's key is not found.
func (s *Store) Event(ctx context.Context, principalID, clientEventID string) (EventRecord, error) {
	r := EventRecord{PrincipalID: principalID, ClientEventID: clientEventID}
	err := s.pool.QueryRow(ctx, eventSQL, principalID, clientEventID).
		Scan(&r.PollID, &r.CandidateID, &r.Status, &r.Reason, &r.Seq, &r.LeafIndex, &r.ReceivedAt, &r.RecordedAt)
	if err != nil {
		return EventRecord{}, interpretError("read event", err)
	}
	return r, nil
}

// Leaf is the log leaf of a recorded event: the fields its leaf hash is
// the hash of.
func (r EventRecord) Leaf() audit.Leaf {
	return audit.Leaf{PollID: r.PollID, CandidateID: r.CandidateID, PrincipalID: r.PrincipalID,
		ClientEventID: r.ClientEventID, ReceivedAt: r.ReceivedAt}
}
